"""kvtier for SGLang: a HiCache L3 storage backend (``HiCacheStorage``) that keeps SGLang's host
KV pages in kvtierd.

Written for and tested against sglang 0.5.23 on the CPU (python/tests/test_sglang_backend.py);
not yet run in an engine on a GPU. SGLang's dynamic-backend factory builds it; start SGLang with::

    python -m sglang.launch_server --model-path MODEL --enable-hierarchical-cache \\
      --hicache-storage-backend dynamic \\
      --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.integrations.sglang", "class_name": "KvtierHiCacheStorage",
        "interface_v1": 1, "url": "unix:///run/kvtier/kvtierd.sock"}'

``interface_v1`` makes SGLang call ``batch_get_v1``/``batch_set_v1``, which copy straight between
SGLang's host pool and kvtierd's arena; without it SGLang calls ``batch_get``/``batch_set`` with
page copies of its own. Extra config keys (validated at start, a bad one named in the error):
``url`` (default: the daemon's default socket), ``tenant_salt``, ``model_id`` (default: SGLang's
model name), ``path`` (``auto``/``shm``/``inline``), ``timeout_s`` (each wait for kvtierd,
default 5), ``retry_s`` (how often kvtierd is tried again while unreachable, default 1),
``hold_s`` (how long a prefix found by ``batch_exists`` is kept from eviction, until SGLang
fetches it; default 5, 0 holds nothing), ``kv_cache_dtype`` (the KV format of a host pool that
keeps it as bytes, as fp8 is kept; default: SGLang's ``--kv-cache-dtype``).

Keys and namespace. SGLang names a page by a SHA-256 hex string that chains over the page's whole
prefix (and the request's cache salt), so each page hash is folded alone under the namespace id
(``fold_foreign_keys(ns, [hash])``): ``get``/``set``/``exists`` of one page carry no prefix, and
must find the keys the batched calls wrote. The namespace names the model, the host pool's class,
layout, dtype (for a pool of bytes, the fp8 encoding or other format of ``kv_cache_dtype``) and
geometry, the page size, the TP rank and size (rank 0 for MLA, whose pages every rank shares and
only one writes), the PP stage and attention-CP rank, and the tenant salt: two configurations
never read each other's pages.

A kvtier block is SGLang's flat data page, ``host_pool.get_data_page(i, flat=True)``, the format
of every path: pages written through ``batch_set_v1`` read back through ``get`` and the reverse.
For SGLang's ``MHATokenToKVPoolHost`` (layouts ``layer_first``, ``page_first``,
``page_first_direct``, ``page_head``) ``batch_get_v1``/``batch_set_v1`` address the pool's own
memory (``put_pages``/``get_pages``, no copy on the way); other pools (MLA, ...) go through their
``get_data_page``/``set_from_flat_data_page``. Every method is one round trip per batch (two for
a shared-memory put).

kvtierd is a cache, never a dependency: when it is absent, stopped or failing, gets are misses,
sets return False and ``batch_exists`` finds nothing; nothing raises into SGLang's threads. Each
outage is logged once per process and a new connection is tried every ``retry_s``. SGLang calls
from three threads (the prefetch query, the prefetch I/O and the backup thread): each has a
connection of its own, so a lookup never waits behind a large put.

Not done: the v2 interface (``batch_*_v2``: hybrid models' extra pools, Mamba and DSA
sidecars), heads split across heterogeneous TP sizes (``tp_lcm_size``). DCP ranks each keep
their own namespace, as PP and CP ranks do; not run with a real DCP engine.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

import torch
from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage, HiCacheStorageConfig,
                                                  HiCacheStorageExtraInfo)
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

import kvtier
from kvtier.integrations.extra_config import MAX_HOLD_S, ExtraConfig
from kvtier.integrations.link import Engine, Link

__all__ = ["KvtierHiCacheStorage"]

logger = logging.getLogger("sglang.kvtier")
# Keys of the extra config that SGLang itself reads (its dynamic backend factory), or adds for
# other backends (--file-storage-path).
_SGLANG_KEYS = ("backend_name", "module_path", "class_name", "interface_v1", "file_storage_path")

_ENGINE = Engine(client_name="sglang", logger=logger,
                 without_data="SGLang goes on without these pages",
                 without_daemon="HiCache runs without its L3 tier")

_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
           torch.int8: "int8", torch.uint8: "int8"}
for _name, _tag in (("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _tag
# SGLang keeps an fp8 KV cache as torch.uint8 in its device and host pools, e4m3 and e5m2 alike:
# the pool's dtype does not tell them apart, SGLang's --kv-cache-dtype does.
_BYTE_DTYPES = (torch.uint8, torch.int8)
_FP8_CACHE_DTYPES = ("fp8_e4m3", "fp8_e5m2")  # SGLang's names that are also kvtier kv_dtypes


def _sglang_kv_cache_dtype() -> Optional[str]:
    """SGLang's --kv-cache-dtype as resolved in this process, or None where it is not published
    (a host pool built outside an engine)."""
    try:
        from sglang.srt.runtime_context import get_model
        return str(get_model().kv_cache_dtype)
    except Exception:  # noqa: BLE001  not published, or a SGLang without it
        return None


def _mha_page_views(pool: Any) -> Optional[tuple[list[torch.Tensor], bool]]:
    """The MHA host pool's memory as uint8 page views whose pages, in order, make up the flat data
    page, and whether a page is addressed by its first token's index (else by index //
    page_size, as the pool's own get_data_page does). None for a pool laid out otherwise.

    Token-addressed views have one row per token, a page wide: rows overlap, and row i is the
    page starting at token i (get_data_page takes any start index there too)."""
    buf = getattr(pool, "kv_buffer", None)
    if type(pool) is not MHATokenToKVPoolHost or buf is None or not buf.is_contiguous():
        return None
    flat = buf.view(torch.uint8).reshape(-1)
    half = flat.numel() // 2  # dimension 0 of every layout is K, V
    token = pool.head_num * pool.head_dim * pool.dtype.itemsize
    layers, ps, size = pool.layer_num, pool.page_size, pool.size
    if pool.layout == "layer_first":    # [2, layers, size, heads, dim]
        starts = [(c * layers + layer) * size * token for c in (0, 1) for layer in range(layers)]
        rows, stride, page, by_token = size - ps + 1, token, ps * token, True
    elif pool.layout == "page_first":   # [2, size, layers, heads, dim]
        starts = [0, half]
        rows, stride, page, by_token = size - ps + 1, layers * token, ps * layers * token, True
    elif pool.layout in ("page_first_direct", "page_head"):  # [2, pages, ...one page...]
        starts = [0, half]
        page = layers * ps * token
        rows, stride, by_token = pool.page_num, page, False
    else:
        return None
    base = flat.storage_offset()
    return [flat.as_strided((rows, page), (stride, 1), base + s) for s in starts], by_token


class KvtierHiCacheStorage(HiCacheStorage):
    """SGLang HiCache L3 storage in kvtierd (see the module docstring). Built by SGLang's factory
    as ``cls(storage_config, kwargs)``; usable once ``register_mem_pool_host`` has named the
    host pool (before that every get misses and every set fails)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None):
        # kwargs: the factory's extra keyword arguments, as a dict (none in 0.5.23).
        self._config = storage_config
        extra = ExtraConfig(dict(storage_config.extra_config or {}).get,
                            "--hicache-storage-backend-extra-config")
        self._url = extra.text("url", None)
        self._salt = extra.text("tenant_salt", "").encode()
        self._path = extra.transfer_path()
        self._timeout_s = extra.seconds("timeout_s", 5.0, above_zero=True)
        self._retry_s = extra.seconds("retry_s", 1.0)
        self._hold_s = extra.seconds("hold_s", 5.0, maximum=MAX_HOLD_S)
        self._model_id = extra.text("model_id", storage_config.model_name or "")
        self._kv_cache_dtype = extra.text("kv_cache_dtype", None)
        if not self._model_id:
            raise kvtier.InvalidArgumentError(
                "--hicache-storage-backend-extra-config: model_id: SGLang gave no model name; "
                "set \"model_id\"")
        extra.warn_unknown((storage_config.extra_config or {}).keys(), logger, _SGLANG_KEYS)
        self.mem_pool_host = None
        self._desc: Optional[kvtier.NamespaceDescriptor] = None
        self._ns_id = b""
        self._block_bytes = 0
        self._views: Optional[tuple[list[torch.Tensor], bool]] = None
        self._local = threading.local()
        self._links: list[Link] = []
        self._lock = threading.Lock()  # guards _links, _counts and _metrics
        self._counts = dict.fromkeys(("lookups", "hit_pages", "loaded_pages", "missed_pages",
                                      "stored_pages", "store_failed_pages"), 0)
        self._metrics: dict[str, list] = {"prefetch_pgs": [], "prefetch_bandwidth": [],
                                          "backup_pgs": [], "backup_bandwidth": []}

    # ---- set-up ----

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Names the host pool whose pages are stored: fixes the namespace and the page format.
        Raises InvalidArgumentError for a pool kvtier cannot describe (SGLang then fails to
        start, with the message)."""
        self.close()  # connections registered another pool's namespace
        super().register_mem_pool_host(mem_pool_host)
        dtype = _DTYPES.get(mem_pool_host.dtype)
        if dtype is None:
            raise kvtier.InvalidArgumentError(
                f"kvtier: host pool dtype {mem_pool_host.dtype} has no kvtier kv_dtype")
        cache_dtype = None
        if mem_pool_host.dtype in _BYTE_DTYPES:
            cache_dtype = self._kv_cache_dtype or _sglang_kv_cache_dtype()
            if not cache_dtype:
                raise kvtier.InvalidArgumentError(
                    "--hicache-storage-backend-extra-config: kv_cache_dtype: the host pool keeps "
                    "its KV as bytes (fp8 e4m3 or e5m2, ...) and SGLang's --kv-cache-dtype "
                    "could not be read; set \"kv_cache_dtype\"")
            dtype = cache_dtype if cache_dtype in _FP8_CACHE_DTYPES else dtype
        try:
            page = mem_pool_host.get_dummy_flat_data_page()
        except NotImplementedError as e:
            raise kvtier.InvalidArgumentError(
                f"kvtier: {type(mem_pool_host).__name__} has no flat data pages: {e}") from e
        self._block_bytes = page.numel() * page.element_size()
        self._desc = self._descriptor(mem_pool_host, dtype, cache_dtype)
        self._ns_id = self._desc.namespace_id()
        self._views = _mha_page_views(mem_pool_host)
        if self._views and sum(v.shape[1] for v in self._views[0]) != self._block_bytes:
            self._views = None  # not the layout assumed: take the pool's own page copies

    def _descriptor(self, pool: Any, dtype: str,
                    cache_dtype: Optional[str]) -> kvtier.NamespaceDescriptor:
        c = self._config
        heads = int(getattr(pool, "head_num", 1) or 1)
        head_dim = int(getattr(pool, "head_dim", 0) or getattr(pool, "kv_cache_dim", 0) or 1)
        layout = f"sglang:{type(pool).__name__}:{pool.layout}"
        if cache_dtype:
            layout += f":{cache_dtype}"
        if c.pp_size > 1:
            layout += f":pp{c.pp_rank}/{c.pp_size}"
        if c.attn_cp_size > 1:
            layout += f":cp{c.attn_cp_rank}/{c.attn_cp_size}"
        # Decode context parallelism: each DCP rank holds its own shard of an MLA page, and the
        # ranks of a DCP group all store (under the same hashes). MLA names no TP rank, so
        # without the DCP rank a rank would read another's shard as its own.
        if getattr(c, "dcp_size", 1) > 1:
            layout += f":dcp{c.dcp_rank}/{c.dcp_size}"
        return kvtier.NamespaceDescriptor(
            model_id=self._model_id, kv_dtype=dtype, num_layers=int(pool.layer_num),
            num_kv_heads=heads, head_dim=head_dim, tokens_per_block=int(pool.page_size),
            layout_tag=layout, tp_rank=0 if c.is_mla_model else c.tp_rank,
            tp_size=max(c.tp_size, 1), tenant_salt=self._salt)

    def _keys(self, hashes: list[str]) -> list[bytes]:
        return [kvtier.fold_foreign_keys(self._ns_id, [h.encode()])[0] for h in hashes]

    def _link(self) -> Link:
        link = getattr(self._local, "link", None)
        if link is None:
            link = self._local.link = Link(self._url, self._timeout_s, self._retry_s,
                                           self._desc, self._block_bytes, _ENGINE)
            with self._lock:
                self._links.append(link)
        return link

    def _try(self, what: str, fn: Callable[[kvtier.Client, kvtier.Namespace], Any],
             failed: Any) -> Any:
        """fn(client, namespace), or `failed` when kvtierd failed (the link logs it) or no host
        pool is registered yet."""
        if self._desc is None:
            return failed
        try:
            return self._link().call(what, fn)
        except kvtier.KvtierError:
            return failed

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, value in deltas.items():
                self._counts[name] += value

    def _measure(self, kind: str, pages: int, seconds: float) -> None:
        if self._config.enable_storage_metrics and pages:
            with self._lock:
                self._metrics[f"{kind}_pgs"].append(pages)
                self._metrics[f"{kind}_bandwidth"].append(
                    pages * self._block_bytes / 1e9 / max(seconds, 1e-9))

    def _page_starts(self, host_indices: torch.Tensor, pages: int) -> Optional[list[int]]:
        """The host pool index of each page's first token."""
        ps = self.mem_pool_host.page_size if self.mem_pool_host is not None else 0
        indices = host_indices.tolist() if host_indices is not None else []
        if not ps or len(indices) != pages * ps:
            logger.error("kvtier: %d host indices for %d pages of %d tokens; nothing moved",
                         len(indices), pages, ps)
            return None
        return indices[::ps]

    def _page_ids(self, starts: list[int]) -> list[int]:
        by_token = self._views[1]
        return starts if by_token else [s // self.mem_pool_host.page_size for s in starts]

    # ---- lookups ----

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys: list[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """The count of leading pages of `keys` in kvtierd (0 when it is unreachable); they are
        held for hold_s so that the prefetch that follows finds them."""
        if not keys:
            return 0
        k = self._keys(keys)
        found = self._try("lookup", lambda c, ns: c.lookup_many(ns, [k], self._hold_s)[0].prefix,
                          0)
        self._count(lookups=1, hit_pages=found)
        return found

    # ---- gets: a page not served (evicted, kvtierd gone) is a miss, never other bytes ----

    def _timed_get(self, fn: Callable[[kvtier.Client, kvtier.Namespace], int], pages: int) -> int:
        started = time.perf_counter()
        served = self._try("get", fn, 0)
        self._measure("prefetch", served, time.perf_counter() - started)
        self._count(loaded_pages=served, missed_pages=pages - served)
        return served

    def get(self, key: str, target_location: Optional[torch.Tensor] = None,
            target_sizes: Any = None) -> Optional[torch.Tensor]:
        """The page into `target_location` (a flat data page; None: a new one), or None."""
        return self.batch_get([key], None if target_location is None else [target_location])[0]

    def batch_get(self, keys: list[str], target_locations: Optional[list[torch.Tensor]] = None,
                  target_sizes: Any = None) -> list[Optional[torch.Tensor]]:
        """Each page into its flat data page; the pages after the first miss are None."""
        if not keys:
            return []
        if target_locations is None:
            if self.mem_pool_host is None:
                return [None] * len(keys)
            target_locations = [self.mem_pool_host.get_dummy_flat_data_page() for _ in keys]
        k, out = self._keys(keys), list(target_locations)
        served = self._timed_get(lambda c, ns: c.get(ns, k, out, self._path), len(keys))
        return [t if i < served else None for i, t in enumerate(out)]

    def batch_get_v1(self, keys: list[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> list[bool]:
        """The pages into the host pool at `host_indices` (page_size indices per key); True for
        the leading pages served."""
        starts = self._page_starts(host_indices, len(keys))
        if not keys or starts is None:
            return [False] * len(keys)
        k, pool = self._keys(keys), self.mem_pool_host
        if self._views:
            views, ids = self._views[0], self._page_ids(starts)
            served = self._timed_get(lambda c, ns: c.get_pages(ns, k, views, ids, self._path),
                                     len(keys))
        else:
            pages = [pool.get_dummy_flat_data_page() for _ in keys]
            served = self._timed_get(lambda c, ns: c.get(ns, k, pages, self._path), len(keys))
            for start, page in zip(starts[:served], pages):
                pool.set_from_flat_data_page(start, page)
        return [i < served for i in range(len(keys))]

    # ---- sets ----

    def _timed_put(self, keys: list[str],
                   fn: Callable[[kvtier.Client, kvtier.Namespace, list[bytes]], list]
                   ) -> list[bool]:
        k = self._keys(keys)

        def put(c: kvtier.Client, ns: kvtier.Namespace) -> list:
            statuses = fn(c, ns, k)
            unknown = next((s for s in statuses if s.code == "NOT_FOUND"), None)
            if unknown is not None:
                # kvtierd forgot the namespace (restarted, or clear() dropped it): the link
                # registers it again and retries (lookups and gets in it just miss meanwhile).
                raise kvtier.NotFoundError(unknown.message)
            return statuses

        started = time.perf_counter()
        statuses = self._try("put", put, None)
        stored = [s.stored for s in statuses] if statuses is not None else [False] * len(keys)
        self._measure("backup", sum(stored), time.perf_counter() - started)
        self._count(stored_pages=sum(stored), store_failed_pages=len(keys) - sum(stored))
        return stored

    def set(self, key: str, value: Optional[torch.Tensor] = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        """Stores one flat data page; True when kvtierd holds it (stored now or before)."""
        return self.batch_set([key], None if value is None else [value])

    def batch_set(self, keys: list[str], values: Optional[list[torch.Tensor]] = None,
                  target_locations: Any = None, target_sizes: Any = None) -> bool:
        """Stores flat data pages; True when kvtierd holds every one."""
        if not keys:
            return True
        if values is None:
            return False
        blocks = [v.contiguous() if isinstance(v, torch.Tensor) else v for v in values]
        return all(self._timed_put(keys, lambda c, ns, k: c.put(ns, k, blocks, self._path)))

    def batch_set_v1(self, keys: list[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> list[bool]:
        """Stores the host pool's pages at `host_indices`; per key, whether kvtierd holds it
        (BUSY, REJECTED or an outage: False, and SGLang stops backing up this request)."""
        starts = self._page_starts(host_indices, len(keys))
        if not keys or starts is None:
            return [False] * len(keys)
        if self._views:
            views, ids = self._views[0], self._page_ids(starts)
            return self._timed_put(keys, lambda c, ns, k: c.put_pages(ns, k, views, ids,
                                                                      self._path))
        pages = [self.mem_pool_host.get_data_page(s, flat=True).contiguous() for s in starts]
        return self._timed_put(keys, lambda c, ns, k: c.put(ns, k, pages, self._path))

    # ---- the rest ----

    def clear(self) -> bool:
        """Drops this namespace's pages from kvtierd (other ranks' and models' stay). Every
        connection registers the namespace again at its next call."""
        return self._try("clear", lambda c, ns: c.drop(ns), None) is not None

    def get_stats(self) -> Any:
        """SGLang's StorageMetrics since the last call: pages and GB/s of each get and put batch
        (recorded when SGLang runs with --enable-storage-metrics)."""
        from sglang.srt.observability.metrics_collector import StorageMetrics

        metrics = StorageMetrics()
        with self._lock:
            for name, values in self._metrics.items():
                getattr(metrics, name).extend(values)
                values.clear()
        return metrics

    def stats(self) -> dict[str, int]:
        """kvtier's counters of this backend: lookups, hit_pages, loaded_pages, missed_pages,
        stored_pages, store_failed_pages, outages (each logged once per process) and connects."""
        with self._lock:
            links = list(self._links)
            return dict(self._counts, outages=sum(x.outages for x in links),
                        connects=sum(x.connects for x in links))

    def close(self) -> None:
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()
        self._local = threading.local()
