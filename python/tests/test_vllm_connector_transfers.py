"""The vLLM connector's worker side: saves and loads (layer by layer or whole, beside the forward
pass, through a link of their own, staged in pieces of bounded size) and delayed frees: a
finished request's blocks kept until its last store is done, with speculative decoding too, and
stores held for a step's output given up when it never comes. The stand-ins are in
vllm_connectors.py.
"""
import os
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402

import kvtier  # noqa: E402
from kvtier.integrations.vllm import KvtierConnector, KvtierConnectorMetadata  # noqa: E402
from kvtier.integrations.vllm_metadata import Transfer  # noqa: E402
from vllm_connectors import (BLOCK, LAYERS, Gate, VllmBooks, b_after_a, blocks,  # noqa: E402
                             caches, computed, configs, finish, finished_loads, match, output, page,
                             request, sched_and_worker, step, store_request, sync_load_meta,
                             through_proxy)


@pytest.mark.parametrize("layout", ["flash_attn", "flashinfer"])
def test_store_then_load_across_requests(unix_url, layout):
    kv = caches(layout)
    sched, worker = sched_and_worker(unix_url, layout, kv=kv)

    hashes_a = [os.urandom(32) for _ in range(5)]
    a = request("A", hashes_a, 5 * BLOCK + 3)
    assert match(sched, a, 0) == (0, False)
    a_ids = [3, 7, 1, 9, 4, 12]
    sched.update_state_after_alloc(a, blocks(a_ids), 0)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="A", block_ids=(a_ids,), num_computed_tokens=0)],
        scheduled={"A": 5 * BLOCK + 3}))
    assert meta.loads == [] and [t.block_ids for t in meta.stores] == [a_ids[:5]]
    step(worker, meta)
    # A's blocks are freed once the worker reports its saves done (here they are).
    assert finish(sched, worker, a, a_ids)

    # B shares A's first three blocks; vLLM's own prefix cache already holds the first one.
    b = request("B", hashes_a[:3] + [os.urandom(32)], 4 * BLOCK + 1)
    # Nothing else runs (A has finished): the load is made before B's forward pass.
    assert match(sched, b, BLOCK) == (2 * BLOCK, False)
    b_ids = [20, 21, 22, 23, 24]
    sched.update_state_after_alloc(b, blocks(b_ids), 2 * BLOCK)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="B", block_ids=(b_ids,), num_computed_tokens=3 * BLOCK)],
        scheduled={"B": BLOCK + 1}))
    assert [t.block_ids for t in meta.loads] == [[21, 22]]
    # B's own fourth block is computed over the load: held back until the step's output shows
    # that the load was served.
    assert meta.stores == [] and meta.withheld == {"B"}
    worker_meta = step(worker, meta)
    for cache in kv.values():
        assert torch.equal(page(cache, layout, 21), page(cache, layout, 7))
        assert torch.equal(page(cache, layout, 22), page(cache, layout, 1))
    invalid = worker.get_block_ids_with_load_errors()
    assert invalid == set()
    sched.update_connector_output(SimpleNamespace(invalid_block_ids=invalid,
                                                  kv_connector_worker_meta=worker_meta))

    # The next step, a decode step, stores B's fourth block. 66 tokens: still four full blocks
    # (B has only four hashes).
    meta = sched.build_connector_meta(output(cached=SimpleNamespace(
        req_ids=["B"], new_block_ids=[None], num_computed_tokens=[4 * BLOCK + 1],
        resumed_req_ids=set()), scheduled={"B": 1}))
    assert [t.block_ids for t in meta.stores] == [[23]] and meta.withheld == set()
    step(worker, meta)

    again = request("B2", b.block_hashes, 4 * BLOCK + 1)
    # B runs: B2's load is asynchronous, beside B's steps.
    assert match(sched, again, 0) == (4 * BLOCK, True)
    for conn in (sched, worker):
        conn.shutdown()


@pytest.mark.parametrize("layout", ["flash_attn", "flashinfer"])
def test_a_synchronous_load_goes_layer_by_layer(unix_url, layout):
    """A load made for this step's forward pass runs on the layer-load thread: each attention
    layer's wait_for_layer_load returns once that layer's pages of every block are in (K and V
    apart or together), before the later layers', and the load is counted after the pass."""
    kv = caches(layout)
    sched, worker = sched_and_worker(unix_url, layout, salt="layers", kv=kv)
    meta = sync_load_meta(sched, worker, [os.urandom(32) for _ in range(3)], [2, 5, 8],
                          [20, 21, 22])
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    assert len(worker._layer_loads) == 1
    for name in LAYERS:
        worker.wait_for_layer_load(name)
        for src, dst in zip([2, 5, 8], [20, 21, 22]):
            assert torch.equal(page(kv[name], layout, dst), page(kv[name], layout, src)), name
    worker.wait_for_save()
    assert worker.get_block_ids_with_load_errors() == set()
    assert worker.stats()["loaded_blocks"] == 3
    worker.clear_connector_metadata()
    for conn in (sched, worker):
        conn.shutdown()


def test_layerwise_off_loads_before_the_pass(unix_url):
    """Extra config "layerwise": false: the synchronous load is made whole in start_load_kv."""
    kv = caches("flashinfer")
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="whole", kv=kv,
                                     extra={"layerwise": False})
    meta = sync_load_meta(sched, worker, [os.urandom(32) for _ in range(2)], [1, 2], [10, 11])
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    assert worker._layer_loads == [] and worker.stats()["loaded_blocks"] == 2
    for name in LAYERS:
        assert torch.equal(page(kv[name], "flashinfer", 10), page(kv[name], "flashinfer", 1))
    worker.wait_for_save()
    worker.clear_connector_metadata()
    for conn in (sched, worker):
        conn.shutdown()


def test_loads_run_beside_the_forward_pass(kvtierd, proxy):
    """A load through a link that holds kvtierd's answer for a second: start_load_kv returns at
    once, get_finished does not report the request until its blocks are in, and then they are
    the stored ones."""
    sched, fast, slow = through_proxy(kvtierd, proxy, "async", register=False)
    kv_fast, kv_slow = caches("flashinfer"), {k: torch.zeros_like(v)
                                              for k, v in caches("flashinfer").items()}
    fast.register_kv_caches(kv_fast)
    slow.register_kv_caches(kv_slow)
    hashes = [os.urandom(32) for _ in range(2)]
    store_request(sched, fast, "A", hashes, [0, 1, 2])
    b = request("B", hashes, 2 * BLOCK + 1)
    assert match(sched, b, 0) == (2 * BLOCK, True)
    sched.update_state_after_alloc(b, blocks([5, 6, 7]), 2 * BLOCK)
    meta = sched.build_connector_meta(output())
    assert [t.block_ids for t in meta.loads] == [[5, 6]]
    meta.computed_tokens = 256  # a step that computes other requests meanwhile
    proxy.fault, proxy.delay_s = "slow", 1.0
    slow.bind_connector_metadata(meta)
    slow.start_load_kv(None)
    assert slow.get_finished(set()) == (None, None)  # the forward pass would run now
    slow.wait_for_save()
    finished_loads(slow, {"B"})
    assert slow.get_block_ids_with_load_errors() == set()
    slow.clear_connector_metadata()
    for name in LAYERS:
        assert torch.equal(kv_slow[name][5], kv_fast[name][0])
        assert torch.equal(kv_slow[name][6], kv_fast[name][1])
    assert slow.stats()["loaded_blocks"] == 2
    for conn in (sched, fast, slow):
        conn.shutdown()


def saves_handed_off(sched, worker, req_id, hashes, ids):
    """A new request's step that computes its two blocks: its saves are handed off."""
    r = request(req_id, hashes, 2 * BLOCK + 1)
    assert match(sched, r, 0) == (0, False)
    sched.update_state_after_alloc(r, blocks(ids), 0)
    worker.bind_connector_metadata(sched.build_connector_meta(output(
        [SimpleNamespace(req_id=req_id, block_ids=(ids,), num_computed_tokens=0)],
        scheduled={req_id: 2 * BLOCK + 1})))
    worker.start_load_kv(None)
    worker.wait_for_save()
    worker.clear_connector_metadata()
    return r


def test_saves_run_after_the_step_and_keep_their_blocks_until_done(kvtierd, proxy):
    """Saves through a link that holds kvtierd's answers to KVT.PUT for a second: the step ends
    at once, the request's blocks stay allocated (request_finished delays their free) until
    get_finished reports the request saved, and a preemption waits for its request's saves
    before the forward pass that may reuse their blocks."""
    sched, fast, slow = through_proxy(kvtierd, proxy, "save")
    proxy.fault, proxy.delay_s, proxy.slowed = "slow", 1.0, {b"KVT.PUT"}

    def computed(req_id, hashes, ids):
        return saves_handed_off(sched, slow, req_id, hashes, ids)

    hashes = [os.urandom(32) for _ in range(2)]
    a = computed("A", hashes, [0, 1, 2])
    assert slow.stats()["stored_blocks"] == 0  # still on its way
    assert sched.request_finished(a, [0, 1, 2]) == (True, None)
    slow.bind_connector_metadata(sched.build_connector_meta(output()))
    assert slow.get_finished({"A"}) == (None, None)  # vLLM keeps A's blocks
    slow.clear_connector_metadata()
    deadline = time.monotonic() + 10
    while (sent := slow.get_finished(set())[0]) is None:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert sent == {"A"} and slow.stats()["stored_blocks"] == 2
    assert match(sched, request("B", hashes, 2 * BLOCK + 1), 0)[0] == 2 * BLOCK

    computed("C", [os.urandom(32) for _ in range(2)], [3, 4, 5])
    assert slow.stats()["stored_blocks"] == 2
    slow.handle_preemptions(KvtierConnectorMetadata(preempted={"C"}))
    assert slow.stats()["stored_blocks"] == 4
    for conn in (sched, fast, slow):
        conn.shutdown()


def test_a_preemption_waits_only_for_its_requests_saves(kvtierd, proxy):
    """Saves through a link that holds kvtierd's answers to KVT.PUT for a second each: a
    preemption of C waits for C's saves (and those queued before them), not for the saves queued
    after them (E's); it used to wait for every save queued, all of which held the engine's
    step."""
    sched, fast, slow = through_proxy(kvtierd, proxy, "preempt")
    proxy.fault, proxy.delay_s, proxy.slowed = "slow", 1.0, {b"KVT.PUT"}
    saves_handed_off(sched, slow, "C", [os.urandom(32) for _ in range(2)], [0, 1, 2])
    saves_handed_off(sched, slow, "E", [os.urandom(32) for _ in range(2)], [3, 4, 5])
    slow.handle_preemptions(KvtierConnectorMetadata(preempted={"C"}))
    assert slow.stats()["stored_blocks"] == 2  # C's; E's take another second
    slow.wait_for_saves()
    assert slow.stats()["stored_blocks"] == 4
    for conn in (sched, fast, slow):
        conn.shutdown()


def test_a_request_finished_while_its_stores_are_held_keeps_its_blocks(unix_url):
    """B finishes (aborted, say) while the stores of its step with a synchronous load are held
    back, that step's output not in yet: the worker does not report B saved, for vLLM would
    free the blocks still to be stored, until they are."""
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="held")
    b, load_step = b_after_a(sched, worker, [os.urandom(32) for _ in range(4)], [5, 6, 7, 8, 9])
    worker_meta = step(worker, load_step)
    assert sched.request_finished(b, [5, 6, 7, 8, 9]) == (True, None)
    meta = sched.build_connector_meta(output())
    assert meta.stores == [] and meta.withheld == {"B"}
    worker.bind_connector_metadata(meta)
    assert worker.get_finished({"B"}) == (None, None)
    worker.clear_connector_metadata()

    sched.update_connector_output(SimpleNamespace(
        invalid_block_ids=worker.get_block_ids_with_load_errors(),
        kv_connector_worker_meta=worker_meta))
    meta = sched.build_connector_meta(output())
    assert [t.block_ids for t in meta.stores] == [[7, 8]] and meta.withheld == set()
    step(worker, meta)
    assert worker.get_finished(set()) == ({"B"}, None)
    for conn in (sched, worker):
        conn.shutdown()


def test_a_request_whose_held_stores_were_given_up_then_finished_gives_its_blocks_back(unix_url):
    """The stores held for a step whose output never came are dropped after
    _MAX_UNCONFIRMED_STEPS; B fills no block after that and finishes: no store of it ever reached
    the worker, which never reported it, and vLLM kept its blocks for ever."""
    from kvtier.integrations import vllm_scheduler as connector
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="given-up")
    b_ids = [5, 6, 7, 8, 9]
    b, load_step = b_after_a(sched, worker, [os.urandom(32) for _ in range(4)], b_ids)
    step(worker, load_step)  # its output is never handed to the scheduler
    for _ in range(connector._MAX_UNCONFIRMED_STEPS):
        step(worker, sched.build_connector_meta(output()))
    assert sched._held == []
    books = VllmBooks()
    books.finish(sched, b, b_ids)
    for _ in range(3):
        books.step(sched, worker)
    assert books.kept == set() and books.freed == {"B"}
    assert worker.stats()["stored_blocks"] == 2  # A's; none of B's, never checked
    for conn in (sched, worker):
        conn.shutdown()


def test_a_synchronous_load_has_a_link_of_its_own(unix_url):
    """"layerwise": false (as with CUDA caches): the step's synchronous load went through the
    link the load thread was using for an asynchronous load, from the engine's thread, at the
    same time (a link serves one thread: a dropped or reconnected connection under the other's
    call). It now has a link of its own, and does not wait for the asynchronous load."""
    kv = caches("flashinfer")
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="sync-link", kv=kv,
                                     extra={"layerwise": False})
    hashes = [os.urandom(32) for _ in range(2)]
    store_request(sched, worker, "A", hashes, [0, 1, 2])
    keys = sched._keys(request("A", hashes, 2 * BLOCK + 1), 2)
    gate = Gate(worker._load_link)
    worker.bind_connector_metadata(KvtierConnectorMetadata(loads=[Transfer("X", keys, [10, 11])]))
    worker.start_load_kv(None)
    assert gate.entered.wait(10)  # X's load is running, on the load thread
    worker.wait_for_save()
    worker.clear_connector_metadata()
    sync = KvtierConnectorMetadata(loads=[Transfer("Y", keys, [20, 21], sync=True)])
    worker.bind_connector_metadata(sync)
    worker.start_load_kv(None)
    assert worker.get_block_ids_with_load_errors() == set()
    for name in LAYERS:
        assert torch.equal(kv[name][20], kv[name][0]) and torch.equal(kv[name][21], kv[name][1])
    worker.wait_for_save()
    worker.clear_connector_metadata()
    gate.open_.set()
    worker.bind_connector_metadata(KvtierConnectorMetadata())
    finished_loads(worker, {"X"})
    worker.clear_connector_metadata()
    assert worker.get_block_ids_with_load_errors() == set()
    assert worker.stats()["loaded_blocks"] == 4
    for conn in (sched, worker):
        conn.shutdown()


def test_a_device_cache_is_staged_in_pieces_of_bounded_size(unix_url, monkeypatch):
    """A CUDA cache moves through pinned host staging buffers, which were sized to the whole
    transfer (16 GiB for a 128K-token Llama-3-8B prefix). They are capped now
    (_STAGING_CAP_BYTES, as the C++ client caps its staging) and the blocks go a piece at a time.
    Checked on CPU caches sent down the staged path, with a cap of two blocks: every call
    moves two blocks at most, through buffers of two rows, and a load stops at its first block
    not served."""
    from kvtier.integrations import vllm_worker
    kv = caches("flashinfer")
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="staged", kv=kv)
    worker._stage = True
    monkeypatch.setattr(vllm_worker, "_STAGING_CAP_BYTES", 2 * worker._block_bytes + 1,
                        raising=False)
    calls = []  # (method, blocks moved, blocks the buffers' memory holds)
    for name in ("get_pages", "put_pages"):
        def spy(client, ns, keys, pages, block_ids, *args, _real=getattr(kvtier.Client, name),
                _name=name):
            rows = max(p.untyped_storage().nbytes() // p.shape[1] for p in pages)
            calls.append((_name, len(keys), rows))
            return _real(client, ns, keys, pages, block_ids, *args)
        monkeypatch.setattr(kvtier.Client, name, spy)
    hashes = [os.urandom(32) for _ in range(5)]
    store_request(sched, worker, "A", hashes, [0, 1, 2, 3, 4, 5])
    assert calls == [("put_pages", 2, 2), ("put_pages", 2, 2), ("put_pages", 1, 2)]
    assert worker.stats()["stored_blocks"] == 5

    calls.clear()
    keys = sched._keys(request("A", hashes, 5 * BLOCK + 1), 5)
    step(worker, KvtierConnectorMetadata(loads=[Transfer("B", keys, [20, 21, 22, 23, 24])]))
    assert calls == [("get_pages", 2, 2), ("get_pages", 2, 2), ("get_pages", 1, 2)]
    assert worker.get_block_ids_with_load_errors() == set()
    for name in LAYERS:
        for src, dst in zip(range(5), range(20, 25)):
            assert torch.equal(kv[name][dst], kv[name][src])

    calls.clear()  # the fourth block is not there: the first three load, the rest is recomputed
    missing = keys[:3] + [kvtier.fold_foreign_keys(bytes(16), [os.urandom(32)])[0]] + keys[4:]
    step(worker, KvtierConnectorMetadata(loads=[Transfer("C", missing, [25, 26, 27, 28, 29])]))
    assert [n for _, n, _ in calls] == [2, 2]
    assert worker.get_block_ids_with_load_errors() == {28, 29}
    for name in LAYERS:
        assert torch.equal(kv[name][27], kv[name][2])
    for conn in (sched, worker):
        conn.shutdown()


def spec_decode_step(worker, meta, finished=()):
    """One engine step as vLLM runs it with speculative decoding (gpu_model_runner's
    defer_finalize): get_finished, with the requests finished since the last step, before
    wait_for_save. Returns get_finished's answer."""
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    reported = worker.get_finished(set(finished))
    worker.wait_for_save()
    worker.clear_connector_metadata()
    return reported


def finished_in_a_held_step(sched, worker, hashes, b_ids):
    """B (A's prefix loaded synchronously, then a block of its own) finishes in that step; its
    new block's store, held back until the step's output is in, goes in the next step: its
    metadata."""
    b, load_step = b_after_a(sched, worker, hashes, b_ids)
    worker_meta = step(worker, load_step)
    sched.update_connector_output(SimpleNamespace(
        invalid_block_ids=worker.get_block_ids_with_load_errors(),
        kv_connector_worker_meta=worker_meta))
    assert sched.request_finished(b, b_ids) == (True, None)
    meta = sched.build_connector_meta(output())
    assert [t.block_ids for t in meta.stores] == [b_ids[2:4]]
    return meta


def test_speculative_decoding_reports_a_request_saved_once_its_last_store_is_copied(unix_url):
    """With speculative decoding vLLM calls get_finished before wait_for_save. B, whose stores
    were held back by its step's synchronous load, finishes in that step: its stores go in the
    next, and get_finished({"B"}) ran before they were handed to the save thread. B, with no
    store before, was never reported saved (its blocks held for ever); it is, once they are."""
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="spec-first")
    meta = finished_in_a_held_step(sched, worker, [os.urandom(32) for _ in range(4)],
                                   [5, 6, 7, 8, 9])
    stored = worker.stats()["stored_blocks"]
    gate = Gate(worker._link)
    assert "B" not in (spec_decode_step(worker, meta, {"B"})[0] or ())
    assert gate.entered.wait(10)
    assert "B" not in (worker.get_finished(set())[0] or ())  # its store is still running
    gate.open_.set()
    worker.wait_for_saves()
    assert worker.stats()["stored_blocks"] == stored + 2
    assert worker.get_finished(set()) == ({"B"}, None)
    for conn in (sched, worker):
        conn.shutdown()


def test_speculative_decoding_never_reports_a_request_saved_before_its_last_store(unix_url):
    """As above, B having stored a block in an earlier step (the worker knew it as a saving
    request): get_finished({"B"}) before wait_for_save reported it saved at once, before its
    last store had read its blocks, which vLLM then freed for others to write."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="spec-again")
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    keys = kvtier.fold_foreign_keys(bytes(16), [os.urandom(32) for _ in range(2)])
    step(worker, KvtierConnectorMetadata(stores=[Transfer("B", keys[:1], [5])]))
    gate = Gate(worker._link)
    last = KvtierConnectorMetadata(stores=[Transfer("B", keys[1:], [6])], delayed_frees={"B"})
    assert spec_decode_step(worker, last, {"B"}) == (None, None)
    assert gate.entered.wait(10)
    assert worker.get_finished(set()) == (None, None)  # its last store is still running
    gate.open_.set()
    worker.wait_for_saves()
    assert worker.get_finished(set()) == ({"B"}, None)
    assert worker.stats()["stored_blocks"] == 2
    worker.shutdown()


def test_saves_that_fall_behind_are_dropped_not_waited_for(unix_url):
    """vLLM keeps a finished request's blocks until its saves are done: saves slower than the
    engine (held at a gate here) used to queue without bound, and the blocks they held took the
    engine's cache from the requests it runs. The saves queued may cover a quarter of the
    engine's blocks (8 of 32 here); a step's stores past that are dropped at once, uncached, and
    their request is reported saved without waiting. One store larger than that still goes when
    nothing is queued."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="backlog")
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    keys = kvtier.fold_foreign_keys(bytes(16), [os.urandom(32) for _ in range(19)])

    def handed_off(meta):
        worker.bind_connector_metadata(meta)
        worker.start_load_kv(None)
        worker.wait_for_save()
        worker.clear_connector_metadata()

    gate = Gate(worker._link)
    for i, req_id in enumerate("ABCD"):  # 8 blocks: the first save at the gate, three queued
        handed_off(KvtierConnectorMetadata(
            stores=[Transfer(req_id, keys[2 * i:2 * i + 2], [2 * i, 2 * i + 1])]))
    assert gate.entered.wait(10)
    handed_off(KvtierConnectorMetadata(stores=[Transfer("E", keys[8:10], [8, 9])],
                                       delayed_frees={"E"}))
    assert worker.stats()["store_error_blocks"] == 2  # E's, dropped
    assert worker.get_finished(set()) == ({"E"}, None)  # nothing of E's to wait for
    gate.open_.set()
    worker.wait_for_saves()
    assert worker.stats()["stored_blocks"] == 8
    step(worker, KvtierConnectorMetadata(stores=[Transfer("F", keys[10:19], list(range(10, 19)))]))
    assert worker.stats()["stored_blocks"] == 17
    worker.shutdown()


def test_stores_held_for_an_output_that_never_comes_are_dropped_not_held_for_ever(unix_url):
    """Were the step's output never to name it (a vLLM that does not pass the workers' metadata
    on), the held stores, and a finished request's blocks, would wait for ever: after
    _MAX_UNCONFIRMED_STEPS steps they are dropped (never sent unchecked), and later stores flow."""
    from kvtier.integrations import vllm_scheduler as connector
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="never-confirmed")
    b, load_step = b_after_a(sched, worker, [os.urandom(32) for _ in range(4)], [5, 6, 7, 8, 9])
    step(worker, load_step)  # its output is never handed to the scheduler
    assert sched.request_finished(b, [5, 6, 7, 8, 9]) == (True, None)
    meta = sched.build_connector_meta(output())
    assert meta.stores == [] and meta.withheld == {"B"}
    worker.bind_connector_metadata(meta)
    assert worker.get_finished({"B"}) == (None, None)  # B's blocks kept while stores are held
    worker.clear_connector_metadata()
    withheld, sent = [], []
    for _ in range(connector._MAX_UNCONFIRMED_STEPS):
        meta = sched.build_connector_meta(output())
        withheld.append(meta.withheld)
        sent.extend(meta.stores)
        step(worker, meta)
    assert withheld[0] == {"B"} and withheld[-1] == set()
    assert sent == []  # dropped, not stored unchecked
    assert worker.get_finished(set()) == ({"B"}, None)  # vLLM may free B's blocks
    assert sched._held == [] and sched._unconfirmed == set()
    for conn in (sched, worker):
        conn.shutdown()
