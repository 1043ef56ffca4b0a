"""kvtier for vLLM: a KV connector (``KVConnectorBase_V1``) that loads and saves vLLM's paged KV
blocks from and to kvtierd.

Written against vLLM 0.33.0 and checked there with CPU tensors standing in for the paged GPU cache
(python/tests/test_vllm_connector.py); it has not driven a real vLLM engine or a GPU. Start vLLM
with::

    PYTHONHASHSEED=0 vllm serve MODEL --prefix-caching-hash-algo sha256_cbor \\
      --kv-transfer-config '{"kv_connector": "KvtierConnector", "kv_role": "kv_both",
        "kv_connector_module_path": "kvtier.integrations.vllm",
        "kv_connector_extra_config": {"url": "unix:///run/kvtier/kvtierd.sock"}}'

(a fixed PYTHONHASHSEED and a reproducible hash algorithm make vLLM's block hashes, and so the
kvtier keys, the same in every engine process and across restarts). Extra config keys: ``url``
(default: the daemon's default socket), ``tenant_salt``, ``path`` (``auto``/``shm``/``inline``).

How it works. Keys are vLLM's own block hashes (``request.block_hashes``) folded under a namespace
made of the model, its revision, the KV dtype, geometry, block size, cache layout and TP rank, so
a differently configured engine never reads these blocks. One kvtier block is one vLLM block of
every attention layer: for each layer in ``kv_cache_config`` order, the bytes of its page(s) as
they lie in memory (K and V pages separately when the backend keeps them apart); pages are moved
as opaque bytes, never reinterpreted.

* Scheduler: ``get_num_new_matched_tokens`` looks the request's block hashes up (one round trip,
  synchronous) and offers the cached blocks beyond vLLM's own prefix cache, leaving the last prompt
  token to be computed; ``update_state_after_alloc`` records the block ids to load into;
  ``build_connector_meta`` emits the loads and, for every request, the blocks that become full in
  this step, to store.
* Worker: ``register_kv_caches`` turns each layer's cache into per-block page views;
  ``start_load_kv`` copies loads in before the forward pass; ``wait_for_save`` copies stores out
  after it (so the blocks are saved before vLLM can free or reuse them, and ``request_finished``
  needs no delay). CPU caches are copied straight into and out of kvtierd's arena; CUDA caches go
  through a host staging copy (untested).

Not done: asynchronous lookups and loads (``None``/``True`` answers), layer-wise pipelining,
leases between lookup and load (a block evicted in between is reported through
``get_block_ids_with_load_errors`` and recomputed), MLA and hybrid (HMA) models.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                KVConnectorMetadata,
                                                                KVConnectorRole)

import kvtier

__all__ = ["KvtierConnector", "KvtierConnectorMetadata"]

_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
           torch.int8: "int8", torch.uint8: "int8"}
for _name, _tag in (("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _tag


@dataclasses.dataclass
class Transfer:
    """Blocks of one request to move: kvtier keys and the vLLM block ids they go to or come from."""
    req_id: str
    keys: list[bytes]
    block_ids: list[int]


@dataclasses.dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    loads: list[Transfer] = dataclasses.field(default_factory=list)
    stores: list[Transfer] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Tracked:
    request: Any
    block_ids: list[int]
    stored_blocks: int  # leading blocks already stored (or loaded: they are in kvtierd)


def _attention_layers(kv_cache_config: Any) -> tuple[list[str], Any]:
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise NotImplementedError("kvtier: one KV cache group only (no hybrid models); start "
                                  "vLLM with --disable-hybrid-kv-cache-manager")
    return list(groups[0].layer_names), groups[0].kv_cache_spec


def _page_views(t: torch.Tensor, num_blocks: int) -> list[torch.Tensor]:
    """A layer's cache as [num_blocks, page_bytes] uint8 views, one per region of it (K and V
    separately for backends shaped (2, num_blocks, ...))."""
    if t.shape[0] == num_blocks:
        parts = [t]
    elif t.dim() > 1 and t.shape[1] == num_blocks:
        parts = [t[i] for i in range(t.shape[0])]
    else:
        raise NotImplementedError(f"kvtier: cannot find the block dimension of shape {tuple(t.shape)}")
    views = []
    for p in parts:
        inner = sorted((p.stride(d), p.shape[d]) for d in range(1, p.dim()) if p.shape[d] > 1)
        expected = 1
        for stride, size in inner:
            if stride != expected:
                raise NotImplementedError(
                    f"kvtier: a block's page is not dense (shape {tuple(p.shape)}, strides {p.stride()})")
            expected *= size
        page = torch.as_strided(p, (num_blocks, expected), (p.stride(0), 1))
        views.append(page.view(torch.uint8))
    return views


class KvtierConnector(KVConnectorBase_V1):
    """vLLM KV connector backed by kvtierd (see the module docstring)."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = self._kv_transfer_config.get_from_extra_config
        self._path = extra("path", "auto")
        self._client = kvtier.connect(extra("url", None))
        self._block_size = vllm_config.cache_config.block_size
        self._layers, spec = _attention_layers(kv_cache_config)
        self._ns = self._client.register_namespace(
            self._descriptor(vllm_config, spec, extra("tenant_salt", "")),
            spec.page_size_bytes * len(self._layers))
        # Scheduler state.
        self._tracked: dict[str, _Tracked] = {}
        self._loads: list[Transfer] = []
        self._offered: dict[str, tuple[list[bytes], int]] = {}  # keys, locally computed tokens
        # Worker state.
        self._pages: list[torch.Tensor] = []
        self._load_errors: set[int] = set()

    def _descriptor(self, vllm_config: Any, spec: Any, salt: str) -> kvtier.NamespaceDescriptor:
        model = vllm_config.model_config
        parallel = vllm_config.parallel_config
        layout = getattr(vllm_config.cache_config, "kv_cache_layout", None) or "default"
        return kvtier.NamespaceDescriptor(
            model_id=str(model.model), model_revision=str(getattr(model, "revision", "") or ""),
            kv_dtype=_DTYPES[spec.dtype], num_layers=len(self._layers),
            num_kv_heads=spec.num_kv_heads, head_dim=spec.head_size,
            tokens_per_block=self._block_size, layout_tag=f"vllm_pages:{layout}",
            tp_rank=getattr(parallel, "rank", 0) % max(parallel.tensor_parallel_size, 1),
            tp_size=parallel.tensor_parallel_size, tenant_salt=salt.encode())

    def _keys(self, request: Any, num_blocks: int) -> list[bytes]:
        return kvtier.fold_foreign_keys(self._ns, list(request.block_hashes[:num_blocks]))

    # ---- Scheduler side ----

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> tuple[Optional[int], bool]:
        usable = (request.num_prompt_tokens - 1) // self._block_size  # keep one token to compute
        keys = self._keys(request, usable)
        prefix = self._client.lookup(self._ns, keys).prefix if keys else 0
        matched = prefix * self._block_size - num_computed_tokens
        if matched <= 0:
            return 0, False
        self._offered[request.request_id] = (keys[:prefix], num_computed_tokens)
        return matched, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int):
        block_ids = list(blocks.get_block_ids()[0])
        keys, local_tokens = self._offered.pop(request.request_id, ([], 0))
        first = local_tokens // self._block_size
        tracked = self._tracked.setdefault(request.request_id, _Tracked(request, [], 0))
        if num_external_tokens > 0:
            last = first + num_external_tokens // self._block_size
            self._loads.append(Transfer(request.request_id, keys[first:last], block_ids[first:last]))
            tracked.stored_blocks = max(tracked.stored_blocks, last)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        meta = KvtierConnectorMetadata(loads=self._loads)
        self._loads = []
        progress = []
        for new in scheduler_output.scheduled_new_reqs:
            tracked = self._tracked.get(new.req_id)
            if tracked is not None:
                tracked.block_ids = list(new.block_ids[0])
                progress.append((new.req_id, new.num_computed_tokens))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            tracked = self._tracked.get(req_id)
            if tracked is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids and new_ids is not None:
                tracked.block_ids = list(new_ids[0])
            elif new_ids is not None:
                tracked.block_ids.extend(new_ids[0])
            progress.append((req_id, cached.num_computed_tokens[i]))
        for req_id, computed in progress:
            self._plan_store(meta, self._tracked[req_id],
                             computed + scheduler_output.num_scheduled_tokens.get(req_id, 0))
        return meta

    def _plan_store(self, meta: KvtierConnectorMetadata, tracked: _Tracked, tokens: int) -> None:
        full = min(tokens // self._block_size, len(tracked.request.block_hashes),
                   len(tracked.block_ids))
        if full <= tracked.stored_blocks:
            return
        keys = self._keys(tracked.request, full)[tracked.stored_blocks:]
        meta.stores.append(Transfer(tracked.request.request_id, keys,
                                    tracked.block_ids[tracked.stored_blocks:full]))
        tracked.stored_blocks = full

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, Optional[dict]]:
        self._tracked.pop(request.request_id, None)
        self._offered.pop(request.request_id, None)
        return False, None  # stores finish in wait_for_save of the step that filled the blocks

    # ---- Worker side ----

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        num_blocks = self._kv_cache_config.num_blocks
        self._pages = [v for name in self._layers for v in _page_views(kv_caches[name], num_blocks)]
        page_bytes = sum(p.shape[1] for p in self._pages)
        if page_bytes != self._ns.block_bytes:
            raise ValueError(f"kvtier: pages of one block are {page_bytes} bytes, the spec says "
                             f"{self._ns.block_bytes}")

    def _transfer(self, t: Transfer, load: bool) -> int:
        on_cpu = self._pages[0].device.type == "cpu"
        if on_cpu:
            if load:
                return self._client.get_pages(self._ns, t.keys, self._pages, t.block_ids, self._path)
            kvtier.raise_for_statuses(
                self._client.put_pages(self._ns, t.keys, self._pages, t.block_ids, self._path))
            return len(t.keys)
        # A device cache: stage the blocks in host memory (one copy each way).
        index = torch.tensor(t.block_ids, device=self._pages[0].device)
        staged = [torch.empty((len(t.block_ids), p.shape[1]), dtype=torch.uint8, pin_memory=True)
                  for p in self._pages]
        if load:
            served = self._client.get_pages(self._ns, t.keys, staged, range(len(t.keys)), self._path)
            for p, s in zip(self._pages, staged):
                p.index_copy_(0, index[:served], s[:served].to(p.device))
            return served
        for p, s in zip(self._pages, staged):
            s.copy_(p.index_select(0, index))
        kvtier.raise_for_statuses(self._client.put_pages(self._ns, t.keys, staged,
                                                         range(len(t.keys)), self._path))
        return len(t.keys)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        for t in meta.loads:
            served = self._transfer(t, load=True)
            self._load_errors.update(t.block_ids[served:])  # evicted since the lookup: recompute

    def wait_for_layer_load(self, layer_name: str) -> None:
        return

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any,
                      **kwargs: Any) -> None:
        return  # whole blocks (all layers) are saved at the end of the step, in wait_for_save

    def wait_for_save(self):
        meta = self._get_connector_metadata()
        for t in meta.stores:
            try:
                self._transfer(t, load=False)
            except kvtier.BusyError:
                pass  # no room now: these blocks stay uncached, the request is unaffected

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def shutdown(self):
        self._client.close()
