"""The vLLM connector when things go wrong: kvtierd absent, killed, restarted or refusing a key;
loads that fail or raise, whose blocks vLLM recomputes and the connector then stores; and
requests aborted or preempted while their stores are held or their load runs, whose blocks must
still go back to vLLM. The stand-ins are in vllm_connectors.py.
"""
import os
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")


import kvtier  # noqa: E402
from kvtier.integrations.vllm import KvtierConnectorMetadata  # noqa: E402
from kvtier.integrations.vllm_metadata import Transfer  # noqa: E402
from kvtierd_process import Daemon  # noqa: E402  (conftest puts it on sys.path)
from vllm_connectors import (BLOCK, LAYERS, Gate, VllmBooks, ask_until_known,  # noqa: E402
                             b_after_a, blocks, caches, computed, finished_loads, match, output,
                             request, sched_and_worker, step, store_request, sync_load_meta,
                             through_proxy)


def test_a_layered_load_whose_daemon_died_ends_and_is_recomputed(tmp_path):
    """kvtierd killed between the lookup and the load: wait_for_layer_load does not hang, and
    every block is reported to vLLM to recompute."""
    daemon = Daemon(tmp_path, host_bytes="64MiB", slab_bytes="8MiB")
    daemon.start()
    try:
        sched, worker = sched_and_worker("unix://" + daemon.unix, "flashinfer", salt="kill")
        meta = sync_load_meta(sched, worker, [os.urandom(32) for _ in range(2)], [1, 2], [10, 11])
        daemon.kill()
        worker.bind_connector_metadata(meta)
        worker.start_load_kv(None)
        for name in LAYERS:
            worker.wait_for_layer_load(name)
        worker.wait_for_save()
        assert worker.get_block_ids_with_load_errors() == {10, 11}
        worker.clear_connector_metadata()
        for conn in (sched, worker):
            conn.shutdown()
    finally:
        if daemon.alive():
            daemon.stop()


def test_a_synchronous_load_that_raises_is_recomputed_not_the_engines_error(unix_url,
                                                                           monkeypatch, caplog):
    """An error other than kvtierd's in a load made in the engine's step (torch failing to pin a
    staging buffer, to allocate or to copy) used to escape start_load_kv into the forward pass:
    its blocks are now reported to vLLM to recompute, and the failure logged once."""
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="raises",
                                     extra={"layerwise": False})
    meta = sync_load_meta(sched, worker, [os.urandom(32) for _ in range(2)], [1, 2], [10, 11])

    def no_memory(*args, **kwargs):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(kvtier.Client, "get_pages", no_memory)
    for _ in range(2):
        step(worker, meta)
        assert worker.get_block_ids_with_load_errors() == {10, 11}
    assert worker.stats()["load_error_blocks"] == 4
    assert sum("a load failed" in r.getMessage() for r in caplog.records) == 1
    for conn in (sched, worker):
        conn.shutdown()


def test_a_key_the_daemon_did_not_store_is_counted_not_taken_for_an_outage(unix_url,
                                                                          monkeypatch):
    """A put's per-key answer other than OK (no room now; with nvme.write_through, TIMEOUT or
    DEVICE_ERROR for a block stored in memory only) counts that block as a store error. It is not
    a lost connection: no outage, no reconnect, and the other blocks of the call count as stored."""
    real_put_pages = kvtier.Client.put_pages

    def last_in_memory_only(self, *args, **kwargs):
        statuses = real_put_pages(self, *args, **kwargs)
        return statuses[:-1] + [SimpleNamespace(stored=False, ok=False, code="TIMEOUT",
                                                message="its copy to NVMe was not made")]

    monkeypatch.setattr(kvtier.Client, "put_pages", last_in_memory_only)
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="per-key")
    store_request(sched, worker, "A", [os.urandom(32) for _ in range(3)], [0, 1, 2, 3])
    w = worker.stats()
    assert (w["stored_blocks"], w["store_error_blocks"], w["outages"], w["connects"]) == \
        (2, 1, 0, 1), w


def test_no_kvtierd_at_start_runs_without_cache(tmp_path, caplog):
    """kvtierd absent when the engine starts: the connector still starts, lookups offer nothing,
    loads already planned are reported as load errors (vLLM recomputes them), stores are skipped,
    and the outage is logged once for all of it."""
    url = "unix://" + str(tmp_path / "none.sock")
    sched, worker = sched_and_worker(url, "flashinfer")
    hashes = [os.urandom(32) for _ in range(2)]
    for i in range(3):
        assert store_request(sched, worker, f"R{i}", hashes, [0, 1, 2])[0] == 0
    meta = KvtierConnectorMetadata(loads=[Transfer("L", kvtier.fold_foreign_keys(
        bytes(16), hashes), [5, 6])])
    step(worker, meta)
    assert worker.get_block_ids_with_load_errors() == {5, 6}
    assert sched.stats()["lookup_errors"] == 3 and sched.stats()["outages"] == 1
    assert worker.stats()["store_error_blocks"] == 6 and worker.stats()["stored_blocks"] == 0
    assert sum("unreachable" in r.getMessage() for r in caplog.records) == 1


def test_kvtierd_restarted_between_calls_reconnects_at_once(tmp_path, caplog):
    """A connection broken by a restart of kvtierd is made again within the same call, with no
    outage logged: the next lookup after the restart is answered by the new process."""
    daemon = Daemon(tmp_path, host_bytes="64MiB", slab_bytes="8MiB")
    daemon.start()
    try:
        sched, worker = sched_and_worker("unix://" + daemon.unix, "flashinfer")
        hashes = [os.urandom(32) for _ in range(2)]

        def lookup(req_id):
            return match(sched, request(req_id, hashes, 2 * BLOCK + 1), 0)

        store_request(sched, worker, "A", hashes, [0, 1, 2])
        assert lookup("B") == (2 * BLOCK, True)
        assert daemon.stop() == 0
        daemon.start()
        assert lookup("C") == (0, False)  # the new process holds nothing: a miss, not an error
        store_request(sched, worker, "D", hashes, [0, 1, 2])
        assert lookup("E") == (2 * BLOCK, True)
        s, w = sched.stats(), worker.stats()
        assert (s["lookup_errors"], s["outages"], s["connects"]) == (0, 0, 2)
        assert (w["store_error_blocks"], w["outages"], w["connects"]) == (0, 0, 2)
        assert not [r for r in caplog.records if r.name == "vllm.kvtier"]
        for conn in (sched, worker):
            conn.shutdown()
    finally:
        daemon.stop()


def test_a_request_whose_load_failed_is_recomputed_not_reloaded(kvtierd, proxy):
    """vLLM asks again for a request whose asynchronous load failed entirely: it is offered
    nothing this time (loading again could fail for ever), and its recomputed blocks are stored
    again (those the lookup found may be gone)."""
    sched, fast, spoiled = through_proxy(kvtierd, proxy, "failed")
    hashes = [os.urandom(32) for _ in range(2)]
    store_request(sched, fast, "A", hashes, [0, 1, 2])
    b = request("B", hashes, 2 * BLOCK + 1)
    assert match(sched, b, 0) == (2 * BLOCK, True)
    sched.update_state_after_alloc(b, blocks([5, 6, 7]), 2 * BLOCK)
    proxy.fault = "error"
    meta = sched.build_connector_meta(output())
    spoiled.bind_connector_metadata(meta)
    spoiled.start_load_kv(None)
    spoiled.wait_for_save()
    finished_loads(spoiled, {"B"})
    invalid = spoiled.get_block_ids_with_load_errors()
    assert invalid == {5, 6}
    sched.update_connector_output(SimpleNamespace(invalid_block_ids=invalid,
                                                  finished_recving={"B"}))
    lookups = sched.stats()["lookups"]
    assert sched.get_num_new_matched_tokens(b, 0) == (0, False)
    assert sched.stats()["lookups"] == lookups
    sched.update_state_after_alloc(b, blocks([5, 6, 7]), 0)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="B", block_ids=([5, 6, 7],), num_computed_tokens=0)],
        scheduled={"B": 2 * BLOCK + 1}))
    assert meta.loads == [] and [t.block_ids for t in meta.stores] == [[5, 6]]
    for conn in (sched, fast, spoiled):
        conn.shutdown()


def test_blocks_whose_synchronous_load_failed_are_stored_after_the_recompute(kvtierd, proxy):
    """A synchronous load that fails: vLLM recomputes the blocks in the running request, in the
    same blocks. The lookup had counted them as stored, and they were never stored again,
    though kvtierd may no longer hold them."""
    sched, fast, spoiled = through_proxy(kvtierd, proxy, "sync-failed")
    meta = sync_load_meta(sched, fast, [os.urandom(32) for _ in range(2)], [0, 1], [5, 6])
    proxy.fault = "error"
    worker_meta = step(spoiled, meta)
    invalid = spoiled.get_block_ids_with_load_errors()
    assert invalid == {5, 6}
    sched.update_connector_output(SimpleNamespace(invalid_block_ids=invalid,
                                                  kv_connector_worker_meta=worker_meta))
    # vLLM truncates B's computed tokens to its first failed block and computes from there.
    meta = sched.build_connector_meta(output(cached=SimpleNamespace(
        req_ids=["B"], new_block_ids=[None], num_computed_tokens=[0],
        resumed_req_ids=set()), scheduled={"B": 2 * BLOCK + 1}))
    assert meta.loads == [] and [t.block_ids for t in meta.stores] == [[5, 6]]
    for conn in (sched, fast, spoiled):
        conn.shutdown()


def test_blocks_computed_over_a_failed_synchronous_load_are_never_stored(kvtierd, proxy):
    """B's synchronous load fails on one of two workers (as on one TP rank: here two workers of
    one namespace, whose outputs are merged as vLLM merges them). The step's forward pass runs
    anyway, on every worker, over KV that never came (on the other ranks too, through the
    all-reduce): B's blocks that became full in it, and in the next step (planned before that
    output is in, as with asynchronous scheduling), are stored by no worker. Once vLLM has
    recomputed them they are."""
    sched, fast, spoiled = through_proxy(kvtierd, proxy, "sync-spoiled")
    b_ids = [5, 6, 7, 8, 9]
    b, load_step = b_after_a(sched, fast, [os.urandom(32) for _ in range(5)], b_ids)
    decode_step = sched.build_connector_meta(output(cached=SimpleNamespace(
        req_ids=["B"], new_block_ids=[None], num_computed_tokens=[4 * BLOCK + 1],
        resumed_req_ids=set()), scheduled={"B": BLOCK - 1}))  # fills B's fifth block
    stored = [w.stats()["stored_blocks"] for w in (fast, spoiled)]
    proxy.fault = "error"
    outputs = []
    for worker in (fast, spoiled):
        outputs.append((step(worker, load_step), worker.get_block_ids_with_load_errors()))
        step(worker, decode_step)
    assert [invalid for _, invalid in outputs] == [set(), {5, 6}]
    assert [w.stats()["stored_blocks"] for w in (fast, spoiled)] == stored

    worker_meta = outputs[0][0].aggregate(outputs[1][0])
    sched.update_connector_output(SimpleNamespace(invalid_block_ids={5, 6},
                                                  kv_connector_worker_meta=worker_meta))
    # vLLM truncates B's computed tokens to its first failed block and computes from there.
    meta = sched.build_connector_meta(output(cached=SimpleNamespace(
        req_ids=["B"], new_block_ids=[None], num_computed_tokens=[0],
        resumed_req_ids=set()), scheduled={"B": 5 * BLOCK}))
    assert meta.loads == [] and [t.block_ids for t in meta.stores] == [b_ids]
    step(fast, meta)
    assert fast.stats()["stored_blocks"] == stored[0] + 5
    for conn in (sched, fast, spoiled):
        conn.shutdown()


def test_a_request_whose_held_stores_were_spoiled_then_aborted_gives_its_blocks_back(kvtierd,
                                                                                     proxy):
    """B's synchronous load fails, which drops the stores held back from its step; B is aborted
    before its next step. request_finished answered True (stores had been planned) though no
    store would ever reach a worker: no worker reported B, and vLLM kept its blocks for ever."""
    sched, fast, spoiled = through_proxy(kvtierd, proxy, "spoiled-abort")
    b_ids = [5, 6, 7, 8, 9]
    b, load_step = b_after_a(sched, fast, [os.urandom(32) for _ in range(4)], b_ids)
    proxy.fault = "error"
    worker_meta = step(spoiled, load_step)
    invalid = spoiled.get_block_ids_with_load_errors()
    assert invalid == {5, 6}
    sched.update_connector_output(SimpleNamespace(invalid_block_ids=invalid,
                                                  kv_connector_worker_meta=worker_meta))
    books = VllmBooks()
    books.finish(sched, b, b_ids)
    for _ in range(3):
        books.step(sched, spoiled)
    assert books.kept == set() and books.freed == {"B"}
    for conn in (sched, fast, spoiled):
        conn.shutdown()


def test_a_request_preempted_with_held_stores_then_aborted_gives_its_blocks_back(unix_url):
    """B's stores are held back; B is preempted (they are dropped: its blocks may be reused),
    then aborted while waiting: request_finished answered True, no worker reported B."""
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="preempt-abort")
    b_ids = [5, 6, 7, 8, 9]
    b, load_step = b_after_a(sched, worker, [os.urandom(32) for _ in range(4)], b_ids)
    worker_meta = step(worker, load_step)
    books = VllmBooks()
    preempting = SimpleNamespace(**vars(output()), preempted_req_ids={"B"})
    books.step(sched, worker, preempting)
    sched.update_connector_output(SimpleNamespace(  # the load step's output, after the preemption
        invalid_block_ids=set(), kv_connector_worker_meta=worker_meta))
    assert sched._held == [] and sched._released == []
    books.finish(sched, b, [])
    for _ in range(3):
        books.step(sched, worker)
    assert books.kept == set() and books.freed == {"B"}
    for conn in (sched, worker):
        conn.shutdown()


def test_a_request_aborted_while_loading_keeps_its_blocks_until_its_load_is_done(unix_url):
    """R stored its blocks, was preempted, and is loading them back (asynchronously) when it is
    aborted. request_finished answered True (R had stores) and the worker reported R saved at
    once: vLLM freed R's blocks while the load was still writing them (into another request's
    KV), and the load's report later named a request vLLM no longer knew (its engine core
    asserts). vLLM keeps a loading request's blocks itself until it is reported loaded; the
    connector now leaves them to it, and counts the load as running until then."""
    kv = caches("flashinfer")
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="abort-loading", kv=kv)
    books = VllmBooks()
    hashes = [os.urandom(32) for _ in range(4)]
    r = computed(sched, worker, "R", hashes, [1, 2, 3, 4, 5], books)
    other = computed(sched, worker, "O", [os.urandom(32) for _ in range(2)], [6, 7, 8], books)
    books.step(sched, worker, SimpleNamespace(**vars(output()), preempted_req_ids={"R"}))

    assert ask_until_known(sched, r, 0) == (4 * BLOCK, True)  # O runs: loaded beside it
    books.loading.add("R")  # WAITING_FOR_REMOTE_KVS
    sched.update_state_after_alloc(r, blocks([10, 11, 12, 13, 14]), 4 * BLOCK)
    gate = Gate(worker._load_link)
    books.step(sched, worker)
    assert gate.entered.wait(10)  # R's load runs
    books.finish(sched, r, [10, 11, 12, 13, 14])  # aborted
    for _ in range(2):
        books.step(sched, worker)
    assert books.kept == {"R"}  # its blocks are still being written
    # O finishes: nothing runs, but R's load does; P's load is asynchronous too (a synchronous
    # one would wait behind it, and a step's loads and the load thread share nothing).
    books.finish(sched, other, [6, 7, 8])
    books.step(sched, worker)
    assert match(sched, request("P", hashes, 4 * BLOCK + 3), 0) == (4 * BLOCK, True)

    gate.open_.set()
    deadline = time.monotonic() + 10
    while "R" not in books.freed:
        assert time.monotonic() < deadline, "R's load was never reported"
        books.step(sched, worker)
    assert books.kept == set() and books.freed == {"R", "O"}
    for name in LAYERS:
        assert torch.equal(kv[name][10], kv[name][1]) and torch.equal(kv[name][13], kv[name][4])
    assert sched._loading_blocks == {} and sched._finished_loading == set()
    assert sched._failed_loads == set()
    for conn in (sched, worker):
        conn.shutdown()
