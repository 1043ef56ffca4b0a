"""The vLLM connector's configuration: which caches share a namespace (layout, dtype, fp8
encoding, salt); the parallel layouts refused at start (PP, DCP) or served (TP: each rank's own
pages, the prefix every rank holds); extra config values checked at start; the warning about
kv_load_failure_policy "fail"; and the stats and Prometheus metrics vLLM collects from the
connector. The stand-ins are in vllm_connectors.py.
"""
import functools
import os
import threading
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402

import kvtier  # noqa: E402
from kvtier.integrations.vllm import KvtierConnector, KvtierConnectorStats  # noqa: E402
from vllm_connectors import (BLOCK, blocks, caches, configs, match, output, page,  # noqa: E402
                             request, sched_and_worker, step, store_request)


def test_other_configurations_never_match(unix_url):
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="iso")
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


# Values the connector used to take without a word: a hold longer than kvtierd allows (every
# lookup an error), a timeout of 0 (the client's "wait for ever"), a negative one (every connect
# failed, reported as an outage), a path misspelt (every transfer failed), a flag "maybe" (read as
# true), a salt or url that is not a string.
BAD_EXTRA = [("hold_s", 3601), ("hold_s", -1), ("timeout_s", 0), ("timeout_s", -2),
             ("timeout_s", "soon"), ("retry_s", -1), ("lookup_wait_s", "a while"),
             ("path", "SHM"), ("layerwise", "maybe"), ("skip_slow_loads", "perhaps"),
             ("tenant_salt", 42), ("url", 7),
             # The client refuses a timeout past 1e9 s at every connect (read as kvtierd being
             # down); an infinite retry pause never retries.
             ("timeout_s", 1e10), ("retry_s", float("inf")), ("lookup_wait_s", float("inf"))]


@pytest.mark.parametrize("key, value", BAD_EXTRA)
def test_a_bad_extra_config_value_is_named_at_start(unix_url, key, value):
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="bad-extra")
    vllm_config.kv_transfer_config.kv_connector_extra_config[key] = value
    for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
        with pytest.raises(kvtier.InvalidArgumentError, match=f"{key}="):
            KvtierConnector(vllm_config, role, kv_cache_config)


def test_shm_with_a_tcp_url_is_refused_at_start(unix_url):
    """The shared-memory path maps kvtierd's arena: with a tcp:// url every load and save
    failed, one warning for all."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="shm-tcp")
    vllm_config.kv_transfer_config.kv_connector_extra_config.update(
        url="tcp://127.0.0.1:1", path="shm")
    for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
        with pytest.raises(kvtier.InvalidArgumentError, match="path='shm'.*unix://"):
            KvtierConnector(vllm_config, role, kv_cache_config)


def test_an_unknown_key_is_named_in_a_warning(unix_url, caplog):
    """A misspelled tenant_salt left the namespace unsalted (shared with every unsalted engine)
    without a word."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="unknown-key")
    vllm_config.kv_transfer_config.kv_connector_extra_config["tenant-salt"] = "x"
    KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config).shutdown()
    warned = [r.getMessage() for r in caplog.records if "unknown key" in r.getMessage()]
    assert len(warned) == 1 and "'tenant-salt'" in warned[0] and "'tenant_salt'" in warned[0]


@pytest.mark.parametrize("word, on", [("off", False), ("no", False), ("0", False), (False, False),
                                      ("on", True), ("yes", True), ("true", True), (1, True)])
def test_flags_read_the_words_they_say(unix_url, word, on):
    """"layerwise": "off" used to be read as on (only "0" and "false" were off)."""
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="flags",
                                     extra={"layerwise": word, "skip_slow_loads": word})
    assert (worker._layerwise, sched._skip_slow_loads) == (on, on)
    for conn in (sched, worker):
        conn.shutdown()


def test_fail_policy_is_warned_about_once(unix_url, caplog):
    """vLLM's default kv_load_failure_policy ("fail") turns a block the connector could not load
    into a failed request: the scheduler (which applies the policy) says so at start, once."""
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer")
    vllm_config.kv_transfer_config.kv_load_failure_policy = "fail"
    for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
        KvtierConnector(vllm_config, role, kv_cache_config).shutdown()
    warned = [r for r in caplog.records if "kv_load_failure_policy" in r.getMessage()]
    assert len(warned) == 1


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
