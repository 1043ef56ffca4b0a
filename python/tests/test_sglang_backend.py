"""kvtier.integrations.sglang against SGLang's own code (sglang 0.5.23, on the CPU).

What is SGLang's and what stands in:

* the backend is built by SGLang's StorageBackendFactory from the dynamic-backend extra config,
  then given the host pool with register_mem_pool_host, the two calls HiCacheController's
  attach_storage_backend makes;
* the host pool is SGLang's own MHATokenToKVPoolHost, built on the CPU (pin_memory=False, which
  needs no CUDA) over CPU K/V buffers described by SGLang's MHABufferInfo: no stand-in;
* pages move through HiCacheController's own page functions (_page_backup, _storage_hit_query,
  _page_transfer, with _page_get_zero_copy/_page_set_zero_copy when "interface_v1" is set, as
  the controller picks them, else _generic_page_get/_generic_page_set), run on a stand-in
  `self` holding only the fields they read: a whole controller needs a GPU and process groups;
* page hashes come from SGLang's get_storage_hash_str.

Skipped when sglang is not importable.
"""
import dataclasses
import functools
import logging
import queue
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sglang", reason="sglang is not installed (python/requirements-sglang.txt)")

from sglang.srt.managers.cache_controller import (HiCacheController,  # noqa: E402
                                                  PrefetchOperation, StorageOperation)
from sglang.srt.mem_cache.device_pool_info import (KVBufferLayout, KVBuffers,  # noqa: E402
                                                   MHABufferInfo)
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage import StorageBackendFactory  # noqa: E402
from sglang.srt.mem_cache.utils import get_storage_hash_str  # noqa: E402

import kvtier  # noqa: E402
from kvtier.integrations.sglang import KvtierHiCacheStorage  # noqa: E402
from flood import flood  # noqa: E402
from kvtierd_process import Daemon  # noqa: E402  (conftest puts it on sys.path)

PAGE = 4
LAYOUTS = ["layer_first", "page_first", "page_first_direct", "page_head"]


def host_pool(layout="page_first", dtype=torch.bfloat16, page=PAGE, layers=2, heads=2, dim=8,
              device_tokens=64, cls=MHATokenToKVPoolHost):
    """SGLang's MHA host pool on the CPU, its memory filled with random bytes."""
    k = tuple(torch.zeros(device_tokens, heads, dim, dtype=dtype) for _ in range(layers))
    v = tuple(torch.zeros(device_tokens, heads, dim, dtype=dtype) for _ in range(layers))
    pointers = lambda ts: torch.tensor([t.data_ptr() for t in ts], dtype=torch.uint64)  # noqa: E731
    info = MHABufferInfo(
        buffers=KVBuffers(k=k, v=v, k_data_ptrs=pointers(k), v_data_ptrs=pointers(v),
                          layout=KVBufferLayout.NHD),
        page_size=page, head_num=heads, head_dim=dim, v_head_dim=dim, dtype=dtype,
        device=torch.device("cpu"))
    pool = cls(info, 2.0, 0, page, layout, pin_memory=False, device="cpu",
               device_capacity_tokens=device_tokens, start_layer=0, end_layer=layers)
    raw = pool.kv_buffer.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8))
    return pool


def storage_config(url, salt, tp_rank=0, tp_size=1, model="test/tiny", metrics=False, **extra):
    return HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=metrics, is_page_first_layout=False,
        model_name=model,
        extra_config={"backend_name": "kvtier", "module_path": "kvtier.integrations.sglang",
                      "class_name": "KvtierHiCacheStorage", "interface_v1": 1, "url": url,
                      "tenant_salt": salt, "retry_s": 0.1, "timeout_s": 2, **extra})


def attach(config, pool):
    """What HiCacheController.attach_storage_backend does with a "dynamic" backend."""
    backend = StorageBackendFactory.create_backend("dynamic", config, pool)
    backend.register_mem_pool_host(pool)
    return backend


def controller(backend, pool, interface_v1):
    """A stand-in HiCacheController with SGLang's page functions bound to it, chosen as
    attach_storage_backend chooses them for a dynamic backend."""
    ctl = SimpleNamespace(storage_backend=backend, storage_host_pool=pool, mem_pool_host=pool,
                          page_size=pool.page_size, prefetch_sync_queue=queue.Queue())
    bind = functools.partial
    if interface_v1:
        ctl.page_get_func = bind(HiCacheController._page_get_zero_copy, ctl)
        ctl.page_set_func = bind(HiCacheController._page_set_zero_copy, ctl)
    else:
        ctl.page_get_func = bind(HiCacheController._generic_page_get, ctl)
        ctl.page_set_func = bind(HiCacheController._generic_page_set, ctl)
    ctl._page_transfer_kv_batch = bind(HiCacheController._page_transfer_kv_batch, ctl)
    return ctl


def tokens(n_pages, seed):
    return np.random.default_rng(seed).integers(0, 50_000, n_pages * PAGE).tolist()


def page_bytes(pool, indices):
    """The flat data page of each page in `indices`, as bytes."""
    return [pool.get_data_page(int(i), flat=True).contiguous().view(torch.uint8).numpy().tobytes()
            for i in indices[::pool.page_size]]


def backup(ctl, pool, token_ids):
    """Pages for token_ids in the host pool, backed up the way the controller does; returns
    their hashes, host indices and bytes."""
    hashes = get_storage_hash_str(token_ids, None, page_size=PAGE)
    indices = pool.alloc(len(token_ids))
    op = StorageOperation(indices, token_ids, hash_value=hashes)
    HiCacheController._page_backup(ctl, op)
    return hashes, indices, page_bytes(pool, indices), op.completed_tokens


def prefetch(ctl, pool, token_ids):
    """The controller's prefetch of token_ids: its storage query, then its transfer into freshly
    allocated (zeroed) host pages; returns the pages found, the pages loaded and their indices."""
    op = PrefetchOperation("req", token_ids)
    hashes, hit_tokens = HiCacheController._storage_hit_query(ctl, op)
    op.hash_value = hashes
    op.host_indices = pool.alloc(max(hit_tokens, PAGE))[:hit_tokens]
    for start in op.host_indices.tolist()[::PAGE]:
        pool.set_from_flat_data_page(start, pool.get_dummy_flat_data_page())
    loaded = HiCacheController._page_transfer(ctl, op) if hashes else 0
    return hit_tokens // PAGE, loaded, op.host_indices


@pytest.fixture
def salt(request):
    return request.node.name  # each test's pages in namespaces of their own


def test_sglangs_factory_builds_the_backend_from_the_dynamic_config(unix_url, salt):
    backend = attach(storage_config(unix_url, salt), host_pool())
    assert isinstance(backend, KvtierHiCacheStorage)
    assert backend.batch_exists(["00" * 32]) == 0
    backend.close()


@pytest.mark.parametrize("extra, key", [({"timeout_s": "soon"}, "timeout_s"),
                                        ({"timeout_s": 0}, "timeout_s"),
                                        ({"hold_s": 3601}, "hold_s"),
                                        ({"tenant_salt": 42}, "tenant_salt"),
                                        ({"path": "carrier-pigeon"}, "path"),
                                        ({"timeout_s": 1e10}, "timeout_s"),
                                        ({"retry_s": float("inf")}, "retry_s"),
                                        ({"url": "tcp://127.0.0.1:1", "path": "shm"}, "path")])
def test_a_bad_extra_config_key_is_named_at_start(unix_url, salt, extra, key):
    extra = dict(extra)
    url = extra.pop("url", unix_url)
    with pytest.raises(kvtier.InvalidArgumentError, match=key):
        StorageBackendFactory.create_backend("dynamic", storage_config(url, salt, **extra), None)


def test_an_unknown_extra_config_key_is_named_in_a_warning(unix_url, salt, caplog):
    """A misspelled tenant_salt left the pages unsalted without a word; SGLang's own keys
    (backend_name, module_path, ...) are not warned about."""
    backend = attach(storage_config(unix_url, salt, **{"tenant-salt": "x"}), host_pool())
    warned = [r.getMessage() for r in caplog.records if "unknown key" in r.getMessage()]
    assert len(warned) == 1 and "'tenant-salt'" in warned[0] and "'tenant_salt'" in warned[0]
    backend.close()


@pytest.mark.parametrize("interface_v1", [True, False], ids=["v1", "generic"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_pages_come_back_byte_for_byte_through_every_get_path(unix_url, salt, layout,
                                                              interface_v1):
    pool = host_pool(layout)
    backend = attach(storage_config(unix_url, salt), pool)
    ctl = controller(backend, pool, interface_v1)
    token_ids = tokens(5, seed=1)
    hashes, _, written, completed = backup(ctl, pool, token_ids)
    assert completed == len(token_ids)

    found, loaded, indices = prefetch(ctl, pool, token_ids)
    assert (found, loaded) == (5, 5)
    assert page_bytes(pool, indices) == written

    got = [backend.get(h, pool.get_dummy_flat_data_page()) for h in hashes]
    assert [g.view(torch.uint8).numpy().tobytes() for g in got] == written
    got = backend.batch_get(hashes, [pool.get_dummy_flat_data_page() for _ in hashes])
    assert [g.view(torch.uint8).numpy().tobytes() for g in got] == written
    dest = pool.alloc(len(token_ids))
    assert backend.batch_get_v1(hashes, dest) == [True] * 5
    assert page_bytes(pool, dest) == written
    assert all(backend.exists(h) for h in hashes)
    stats = backend.stats()
    assert stats["stored_pages"] == 5 and stats["missed_pages"] == 0
    backend.close()


class OtherHostPool(MHATokenToKVPoolHost):
    """A host pool class the backend does not know the memory layout of (as MLA's): it moves
    pages through the pool's get_data_page / set_from_flat_data_page."""


@pytest.mark.parametrize("layout", ["layer_first", "page_head"])
def test_another_pool_class_goes_through_its_own_page_copies(unix_url, salt, layout):
    pool = host_pool(layout, cls=OtherHostPool)
    backend = attach(storage_config(unix_url, salt), pool)
    assert backend._views is None
    ctl = controller(backend, pool, interface_v1=True)
    token_ids = tokens(3, seed=11)
    hashes, _, written, completed = backup(ctl, pool, token_ids)
    assert completed == len(token_ids)
    found, loaded, indices = prefetch(ctl, pool, token_ids)
    assert (found, loaded) == (3, 3) and page_bytes(pool, indices) == written
    # The pool class is part of the namespace: the MHA pool of the same geometry misses.
    mha = attach(storage_config(unix_url, salt), host_pool(layout))
    assert mha.batch_exists(hashes) == 0
    for b in (backend, mha):
        b.close()


def test_single_page_set_is_read_by_the_zero_copy_get(unix_url, salt):
    pool = host_pool("layer_first")
    backend = attach(storage_config(unix_url, salt), pool)
    [h] = get_storage_hash_str(tokens(1, seed=2), None, page_size=PAGE)
    page = torch.randn(pool.get_dummy_flat_data_page().shape).to(pool.dtype)
    assert backend.set(h, page)
    assert backend.set(h, page)  # already stored counts as stored
    dest = pool.alloc(PAGE)
    assert backend.batch_get_v1([h], dest) == [True]
    assert page_bytes(pool, dest) == [page.view(torch.uint8).numpy().tobytes()]
    backend.close()


def test_a_page_evicted_in_between_is_a_miss(tmp_path, salt):
    """Pages found by batch_exists are held until fetched; pages evicted since they were stored
    (by other puts filling kvtierd's host tier, or deleted) are misses in every get path, and a
    prefix stops at the first of them."""
    daemon = Daemon(tmp_path, host_bytes="16MiB", slab_bytes="8MiB")
    daemon.start()
    try:
        url = "unix://" + daemon.unix
        pool = host_pool(device_tokens=256)
        backend = attach(storage_config(url, salt), pool)
        ctl = controller(backend, pool, interface_v1=True)
        held, gone, cut = (tokens(3, seed=s) for s in (3, 4, 5))
        held_hashes, _, held_bytes, _ = backup(ctl, pool, held)
        gone_hashes, *_ = backup(ctl, pool, gone)
        assert backend.batch_exists(held_hashes) == 3  # and holds them

        # 48,000 pages of 512 bytes, packed 8 to a 4 KiB page of small slots: 1.5x the tier.
        assert backend._block_bytes == 512
        flood(url, backend._block_bytes, PAGE, 96)

        assert backend.batch_exists(gone_hashes) == 0
        assert backend.batch_get_v1(gone_hashes, pool.alloc(3 * PAGE)) == [False] * 3
        assert backend.get(gone_hashes[0]) is None
        assert backend.batch_get(gone_hashes) == [None] * 3
        assert prefetch(ctl, pool, gone)[:2] == (0, 0)
        found, loaded, indices = prefetch(ctl, pool, held)
        assert (found, loaded) == (3, 3) and page_bytes(pool, indices) == held_bytes

        # Evicted between the query and the fetch: the fetch serves the pages before it only.
        cut_hashes, _, cut_bytes, _ = backup(ctl, pool, cut)
        assert backend.batch_exists(cut_hashes) == 3
        with kvtier.connect(url) as other:
            assert other.delete(backend._ns_id, backend._keys(cut_hashes[1:2])) == 1
        dest = pool.alloc(3 * PAGE)
        assert backend.batch_get_v1(cut_hashes, dest) == [True, False, False]
        assert page_bytes(pool, dest)[0] == cut_bytes[0]
        got = backend.batch_get(cut_hashes)
        assert got[1:] == [None, None]
        assert got[0].view(torch.uint8).numpy().tobytes() == cut_bytes[0]
        assert prefetch(ctl, pool, cut)[:2] == (1, 1)
        backend.close()
    finally:
        daemon.stop()


def test_two_tp_ranks_do_not_see_each_others_pages(unix_url, salt):
    pools = [host_pool(), host_pool()]
    ranks = [attach(storage_config(unix_url, salt, tp_rank=r, tp_size=2), pools[r])
             for r in (0, 1)]
    token_ids = tokens(3, seed=6)
    hashes, _, rank0_bytes, _ = backup(controller(ranks[0], pools[0], True), pools[0], token_ids)
    assert ranks[1].batch_exists(hashes) == 0 and not ranks[1].exists(hashes[0])
    assert ranks[1].get(hashes[0]) is None
    assert ranks[1].batch_get_v1(hashes, pools[1].alloc(3 * PAGE)) == [False] * 3

    # Rank 1 stores its own pages under the same hashes; each rank reads its own.
    _, _, rank1_bytes, _ = backup(controller(ranks[1], pools[1], True), pools[1], token_ids)
    assert rank1_bytes != rank0_bytes
    for r, expected in ((0, rank0_bytes), (1, rank1_bytes)):
        dest = pools[r].alloc(3 * PAGE)
        assert ranks[r].batch_get_v1(hashes, dest) == [True] * 3
        assert page_bytes(pools[r], dest) == expected
    for backend in ranks:
        backend.close()


def test_two_dcp_ranks_of_an_mla_model_do_not_see_each_others_shards(unix_url, salt):
    """Decode context parallelism (MLA only): each DCP rank holds its own shard of a page, and
    every rank of the group stores, under the same hashes. MLA namespaces name no TP rank, so the
    second rank's store was "already stored" and its reads returned the first rank's shard. The
    CPU MHA pool stands for the MLA pool here (no MLA host pool runs without SGLang's kernels):
    what is checked is that the ranks' pages stay apart."""
    pools = [host_pool(), host_pool()]
    ranks = [attach(dataclasses.replace(storage_config(unix_url, salt, tp_rank=r, tp_size=2),
                                        is_mla_model=True, dcp_size=2, dcp_rank=r,
                                        logical_page_size=2 * PAGE), pools[r])
             for r in (0, 1)]
    token_ids = tokens(3, seed=16)
    hashes, _, rank0_bytes, _ = backup(controller(ranks[0], pools[0], True), pools[0], token_ids)
    assert ranks[1].batch_exists(hashes) == 0
    _, _, rank1_bytes, _ = backup(controller(ranks[1], pools[1], True), pools[1], token_ids)
    assert rank1_bytes != rank0_bytes
    for r, expected in ((0, rank0_bytes), (1, rank1_bytes)):
        dest = pools[r].alloc(3 * PAGE)
        assert ranks[r].batch_get_v1(hashes, dest) == [True] * 3
        assert page_bytes(pools[r], dest) == expected
    for backend in ranks:
        backend.close()


@pytest.mark.parametrize("other", [
    dict(config={"model": "test/other"}), dict(pool={"page": 8}),
    dict(pool={"dtype": torch.float16}), dict(pool={"layout": "layer_first"}),
    dict(config={"salt": "someone-else"})],
    ids=["model", "page_size", "dtype", "layout", "salt"])
def test_another_configuration_does_not_read_these_pages(unix_url, salt, other):
    pool = host_pool()
    backend = attach(storage_config(unix_url, salt), pool)
    hashes, *_ = backup(controller(backend, pool, True), pool, tokens(2, seed=7))
    config = {"salt": salt, **other.get("config", {})}
    other_pool = host_pool(**other.get("pool", {}))
    stranger = attach(storage_config(unix_url, **config), other_pool)
    assert stranger.batch_exists(hashes) == 0
    assert backend.batch_exists(hashes) == 2
    for b in (backend, stranger):
        b.close()


def test_fp8_encodings_do_not_read_each_others_pages(unix_url, salt):
    """SGLang keeps an fp8 KV cache as uint8 in its host pool, e4m3 and e5m2 alike: both used to
    be one namespace, "int8". The encoding is SGLang's --kv-cache-dtype (here the extra config
    key); a pool of bytes whose format cannot be known is refused at start."""
    pools = [host_pool(dtype=torch.uint8) for _ in range(2)]
    e4m3, e5m2 = (attach(storage_config(unix_url, salt, kv_cache_dtype=name), pool)
                  for name, pool in zip(("fp8_e4m3", "fp8_e5m2"), pools))
    hashes, *_ = backup(controller(e4m3, pools[0], True), pools[0], tokens(2, seed=8))
    assert e4m3.batch_exists(hashes) == 2 and e5m2.batch_exists(hashes) == 0
    for b in (e4m3, e5m2):
        b.close()
    with pytest.raises(kvtier.InvalidArgumentError, match="kv_cache_dtype"):
        attach(storage_config(unix_url, salt), host_pool(dtype=torch.uint8))


def test_clear_drops_only_its_own_pages(unix_url, salt):
    pools = [host_pool(), host_pool()]
    ranks = [attach(storage_config(unix_url, salt, tp_rank=r, tp_size=2), pools[r])
             for r in (0, 1)]
    token_ids = tokens(2, seed=8)
    hashes = [backup(controller(b, p, True), p, token_ids)[0] for b, p in zip(ranks, pools)][0]
    assert ranks[0].clear()
    assert ranks[0].batch_exists(hashes) == 0
    assert ranks[1].batch_exists(hashes) == 2
    assert backup(controller(ranks[0], pools[0], True), pools[0], token_ids)[3] == 2 * PAGE
    assert ranks[0].batch_exists(hashes) == 2
    for backend in ranks:
        backend.close()


def test_get_stats_reports_sglangs_storage_metrics(unix_url, salt):
    pool = host_pool()
    backend = attach(storage_config(unix_url, salt, metrics=True), pool)
    ctl = controller(backend, pool, True)
    token_ids = tokens(3, seed=9)
    backup(ctl, pool, token_ids)
    prefetch(ctl, pool, token_ids)
    metrics = backend.get_stats()
    assert type(metrics).__name__ == "StorageMetrics"
    assert metrics.backup_pgs == [3] and metrics.prefetch_pgs == [3]
    assert all(bw > 0 for bw in metrics.backup_bandwidth + metrics.prefetch_bandwidth)
    assert backend.get_stats().prefetch_pgs == []
    backend.close()


def test_a_daemon_that_is_down_makes_misses_and_is_found_again(tmp_path, salt, caplog):
    """kvtierd absent at start, then started, then killed: nothing raises into SGLang's threads,
    gets miss and sets fail while it is away, each outage is logged once, and the backend
    connects again when it is back."""
    caplog.set_level(logging.INFO, logger="sglang.kvtier")
    daemon = Daemon(tmp_path)
    pool = host_pool()
    backend = attach(storage_config("unix://" + daemon.unix, salt), pool)
    ctl = controller(backend, pool, True)
    token_ids = tokens(2, seed=10)

    def away():
        hashes, _, _, completed = backup(ctl, pool, token_ids)
        assert completed == 0 and not backend.set(hashes[0], pool.get_dummy_flat_data_page())
        assert backend.batch_exists(hashes) == 0 and backend.get(hashes[0]) is None
        assert backend.batch_get_v1(hashes, pool.alloc(2 * PAGE)) == [False, False]

    def unreachable_logs():
        return sum("unreachable" in r.getMessage() for r in caplog.records)

    away()
    worker = threading.Thread(target=away)  # another SGLang thread: its own connection
    worker.start()
    worker.join()
    assert unreachable_logs() == 1
    daemon.start()
    try:
        time.sleep(0.2)  # retry_s
        hashes, _, written, completed = backup(ctl, pool, token_ids)
        assert completed == 2 * PAGE
        assert any("again" in r.getMessage() for r in caplog.records)
        daemon.kill()
        away()
        assert unreachable_logs() == 2
        daemon.start()
        time.sleep(0.2)
        _, _, written, _ = backup(ctl, pool, token_ids)  # the new process starts empty
        found, loaded, indices = prefetch(ctl, pool, token_ids)
        assert (found, loaded) == (2, 2) and page_bytes(pool, indices) == written
        assert backend.stats()["outages"] >= 2
    finally:
        backend.close()
        daemon.stop()
