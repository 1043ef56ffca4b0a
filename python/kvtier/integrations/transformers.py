"""kvtier for Hugging Face transformers: save a prompt's KV blocks, restore the longest cached prefix.

For decoder models whose ``DynamicCache`` holds, per layer, keys and values shaped
``[batch, kv_heads, seq, head_dim]`` (GPT-2, Llama and other GQA/MHA models with full attention)::

    from kvtier.integrations.transformers import KVTierCache, forward

    kv = KVTierCache.for_model(kvtier.connect(url), model)
    logits, cache = forward(model, prompt_ids)              # request A: full prefill
    kv.save(prompt_ids, cache)                              # its full blocks go to kvtierd

    hit = kv.restore(new_prompt_ids)                        # request B: longest cached prefix
    logits, cache = forward(model, new_prompt_ids[hit.num_tokens:], hit.cache)

One kvtier block is ``tokens_per_block`` tokens of every layer: for each layer in order, K then
V, each ``[kv_heads, tokens_per_block, head_dim]`` of one batch row, in the model's dtype (layout
tag ``hf_bhsd``). The namespace is derived from the model's config (a digest of all of it, plus the
name and revision it was loaded under), the KV dtype and the block size, so a different model or
configuration never matches. Models that differ only in their weights (two random initialisations,
a fine-tune saved under the same name and revision) must be told apart by the caller:
pass ``model_id``/``model_revision`` or a ``tenant_salt``.

Bytes move with no intermediate copy: ``save`` gathers block segments straight from the cache's
tensors into the daemon's arena (shared-memory path) or the request, ``restore`` scatters them into
freshly allocated tensors that become the new cache's layers.

CPU models only: the client reads and writes host memory, and a cache on a GPU would need a
staging copy each way that nothing here makes or tests yet. ``for_model`` refuses a model whose
parameters are elsewhere, and ``save`` a cache that is (NotImplementedError), rather than fail
later with a device mismatch in the model's forward pass.

Tested with transformers 5.19 and 5.24 (``layers[i].keys``, the ``cache=`` keyword) and written to
also accept the 4.5x API (``key_cache``/``value_cache`` lists, ``past_key_values=``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
from typing import Any, Optional

import torch

from .. import errors
from ..client import Client, hash_tokens
from .._kvtier import Namespace, NamespaceDescriptor, Status

__all__ = ["KVTierCache", "RestoreResult", "SaveResult", "descriptor_for", "forward",
           "greedy_decode", "layer_kv"]

LAYOUT_TAG = "hf_bhsd"

_logger = logging.getLogger("kvtier.transformers")

_KV_DTYPES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.int8: "int8",
}
for _name, _tag in (("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2")):
    if hasattr(torch, _name):
        _KV_DTYPES[getattr(torch, _name)] = _tag

# Config entries that say nothing about the KV bytes and change between saves of the same model.
_VOLATILE_CONFIG_KEYS = {"transformers_version", "_name_or_path", "_commit_hash",
                         "_attn_implementation_autoset", "torch_dtype", "dtype", "use_cache"}


def _text_config(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if get is not None else config


def _layer_types(cfg: Any) -> list:
    """The attention kind of the model's layers. A config that names none is read as transformers
    reads it when it builds the cache (``get_layer_types_and_kwargs`` in ``cache_utils``): a
    ``sliding_window`` or an ``attention_chunk_size`` makes the layers windowed. Mistral's config,
    for one, names no layer types and has a 4,096-token window: its cache keeps only the last
    window of tokens, whose KV saved under the prompt's first blocks would be wrong bytes."""
    layer_types = getattr(cfg, "layer_types", None)
    if layer_types:
        return list(layer_types)
    if getattr(cfg, "sliding_window", None) is not None:
        return ["sliding_attention"]
    if getattr(cfg, "attention_chunk_size", None) is not None:
        return ["chunked_attention"]
    return ["full_attention"]


def _config_digest(config: Any) -> str:
    d = {k: v for k, v in config.to_dict().items() if k not in _VOLATILE_CONFIG_KEYS}
    text = json.dumps(d, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def descriptor_for(config: Any, dtype: torch.dtype, tokens_per_block: int = 16, *,
                   model_id: Optional[str] = None, model_revision: Optional[str] = None,
                   tenant_salt: bytes = b"") -> NamespaceDescriptor:
    """The namespace descriptor of a model's KV cache.

    Geometry comes from the (text) config: layers (``num_hidden_layers``), KV heads
    (``num_key_value_heads``, else ``num_attention_heads``) and head size (``head_dim``, else
    ``hidden_size // num_attention_heads``). ``model_id`` defaults to the name the model was
    loaded under (or its ``model_type``); ``model_revision`` to ``cfg-<digest of the whole
    config>`` plus the hub commit when known. Raises InvalidArgumentError for an unsupported dtype
    and NotImplementedError for sliding-window or hybrid layers (their caches keep only a window).
    """
    cfg = _text_config(config)
    layer_types = _layer_types(cfg)
    if any(t != "full_attention" for t in layer_types):
        raise NotImplementedError(
            f"kvtier: layer types {sorted(set(layer_types))}: only full-attention layers are supported")
    if dtype not in _KV_DTYPES:
        raise errors.InvalidArgumentError(f"kv dtype {dtype} has no kvtier name")
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    if model_id is None:
        model_id = getattr(cfg, "_name_or_path", "") or getattr(config, "_name_or_path", "") \
            or cfg.model_type
    if model_revision is None:
        model_revision = "cfg-" + _config_digest(config)
        commit = getattr(config, "_commit_hash", None)
        if commit:
            model_revision += "@" + commit
    return NamespaceDescriptor(
        model_id=model_id, model_revision=model_revision, kv_dtype=_KV_DTYPES[dtype],
        num_layers=cfg.num_hidden_layers, num_kv_heads=kv_heads, head_dim=head_dim,
        tokens_per_block=tokens_per_block, layout_tag=LAYOUT_TAG, tenant_salt=tenant_salt)


def layer_kv(cache: Any, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of one layer of a transformers cache, across API versions."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return layers[layer].keys, layers[layer].values
    return cache.key_cache[layer], cache.value_cache[layer]


def _num_layers(cache: Any) -> int:
    layers = getattr(cache, "layers", None)
    return len(layers) if layers is not None else len(cache.key_cache)


def _build_dynamic_cache(kv: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A DynamicCache whose layers are exactly the given tensors (not copies of them)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (k, v) in enumerate(kv):
        # A zero-length update creates and initialises the layer the version's own way; the
        # restored tensors then become its contents without a torch.cat copy.
        cache.update(k[..., :0, :], v[..., :0, :], i)
        if getattr(cache, "layers", None) is not None:
            cache.layers[i].keys, cache.layers[i].values = k, v
        else:
            cache.key_cache[i], cache.value_cache[i] = k, v
    return cache


@dataclasses.dataclass
class SaveResult:
    """What save() did. ``cached_blocks``: leading blocks of the prompt now in kvtierd;
    ``written_blocks``: blocks this call copied; ``failures``: per-key statuses of blocks that
    could not be stored (BUSY: no room now, REJECTED, TIMEOUT), in key order."""
    cached_blocks: int
    written_blocks: int
    failures: list[Status]


@dataclasses.dataclass
class RestoreResult:
    """What restore() found: a DynamicCache holding the first ``num_tokens`` tokens (None when
    nothing was cached), and ``lookup_blocks``, the prefix the daemon reported (``num_tokens`` is
    smaller only when blocks were evicted between the lookup and the copy)."""
    cache: Any
    num_tokens: int
    lookup_blocks: int


class KVTierCache:
    """Saves and restores transformers KV caches of one model in one kvtier namespace."""

    def __init__(self, client: Client, desc: NamespaceDescriptor, dtype: torch.dtype,
                 path: str = "auto"):
        self.client = client
        self.descriptor = desc
        self.dtype = dtype
        self.path = path
        self.namespace: Namespace = client.register_namespace(desc)
        self.tokens_per_block = desc.tokens_per_block
        self._refresh_refused = False  # logged once: a refused refresh costs an order, not data

    @classmethod
    def for_model(cls, client: Client, model: Any, tokens_per_block: int = 16, *,
                  dtype: Optional[torch.dtype] = None, model_id: Optional[str] = None,
                  model_revision: Optional[str] = None, tenant_salt: bytes = b"",
                  path: str = "auto") -> "KVTierCache":
        """For a loaded model: its config, and its dtype unless ``dtype`` says otherwise. Raises
        NotImplementedError for a model that is not on the CPU (see the module docstring)."""
        _refuse_device(_model_device(model), "the model")
        dtype = dtype or model.dtype
        desc = descriptor_for(model.config, dtype, tokens_per_block, model_id=model_id,
                              model_revision=model_revision, tenant_salt=tenant_salt)
        return cls(client, desc, dtype, path)

    def keys(self, tokens: Any) -> list[bytes]:
        """Block keys of the full blocks of ``tokens``."""
        return hash_tokens(self.namespace, tokens)

    def cached_tokens(self, tokens: Any) -> int:
        """How many leading tokens of ``tokens`` kvtierd holds (whole blocks)."""
        return self.client.lookup(self.namespace, self.keys(tokens)).prefix * self.tokens_per_block

    def _parts(self, cache: Any, batch_index: int) -> list[torch.Tensor]:
        parts = []
        for layer in range(_num_layers(cache)):
            for t in layer_kv(cache, layer):
                _refuse_device(t.device, f"layer {layer} of the cache")
                if t.dtype != self.dtype:
                    raise errors.InvalidArgumentError(
                        f"layer {layer}: cache dtype {t.dtype}, namespace dtype {self.dtype}")
                parts.append(t[batch_index])
        if len(parts) != 2 * self.descriptor.num_layers:
            raise errors.InvalidArgumentError(
                f"the cache has {len(parts) // 2} layers, the namespace {self.descriptor.num_layers}")
        return parts

    def save(self, tokens: Any, cache: Any, *, batch_index: int = 0,
             skip_cached: bool = False) -> SaveResult:
        """Store the full blocks of ``tokens`` (1-D or [1, n]) from ``cache`` (which holds at least
        those tokens, from position 0, in row ``batch_index``). Raises NotImplementedError for a
        cache not on the CPU.

        Blocks kvtierd already holds come back ALREADY_EXISTS; on the shared-memory path they
        cost nothing (no slot is reserved, nothing is copied), inline their bytes are sent anyway.
        ``skip_cached`` looks the prefix up first and sends only what follows it: worth it inline
        over a slow link, but the lookup counts in the namespace's hit statistics."""
        tpb = self.tokens_per_block
        cached_len = layer_kv(cache, 0)[0].shape[-2]
        keys = self.keys(tokens)[: cached_len // tpb]
        if not keys:
            return SaveResult(0, 0, [])
        start = self.client.lookup(self.namespace, keys).prefix if skip_cached else 0
        if start == len(keys):
            return SaveResult(start, 0, [])
        statuses = self.client.put_kv(self.namespace, keys[start:], self._parts(cache, batch_index),
                                      start_token=start * tpb, path=self.path)
        # The puts left the chain's deepest blocks the most recent: back in a lookup's order, so
        # that under pressure it loses its tail first (KVT.REFRESH, not counted as a lookup). Only
        # an order: a daemon that refuses it (an older one, or BUSY) loses the save nothing.
        try:
            self.client.refresh(self.namespace, keys)
        except errors.KvtierError as e:
            if not self._refresh_refused:
                _logger.warning("kvtierd did not refresh a saved chain (%s); saves go on", e)
                self._refresh_refused = True
        failures = [s for s in statuses if not s.stored]
        leading = next((i for i, s in enumerate(statuses) if not s.stored), len(statuses))
        return SaveResult(start + leading, sum(s.ok for s in statuses), failures)

    def restore(self, tokens: Any, *, max_tokens: Optional[int] = None) -> RestoreResult:
        """A DynamicCache (on the CPU) for the longest cached prefix of ``tokens`` (1-D or
        [1, n], as ``save`` and ``forward`` take them).

        At most ``max_tokens`` tokens (default ``len(tokens) - 1``: the model must still see at
        least one token to produce logits), rounded down to whole blocks. The caller then feeds
        the tokens from ``result.num_tokens`` on with ``result.cache``.
        """
        tpb = self.tokens_per_block
        tokens = _token_row(tokens)  # a [1, n] batch's length would be 1: nothing restored
        n = len(tokens)
        limit = n - 1 if max_tokens is None else min(max_tokens, n)
        keys = self.keys(tokens[: max(limit, 0) // tpb * tpb])
        if not keys:
            return RestoreResult(None, 0, 0)
        found = self.client.lookup(self.namespace, keys).prefix
        if found == 0:
            return RestoreResult(None, 0, 0)
        d = self.descriptor
        shape = (1, d.num_kv_heads, found * tpb, d.head_dim)
        kv = [(torch.empty(shape, dtype=self.dtype), torch.empty(shape, dtype=self.dtype))
              for _ in range(d.num_layers)]
        parts = [t[0] for pair in kv for t in pair]
        served = self.client.get_kv(self.namespace, keys[:found], parts, path=self.path)
        if served == 0:
            return RestoreResult(None, 0, found)
        if served < found:
            kv = [(k[..., : served * tpb, :], v[..., : served * tpb, :]) for k, v in kv]
        return RestoreResult(_build_dynamic_cache(kv), served * tpb, found)


def _model_device(model: Any) -> torch.device:
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    parameter = next(iter(model.parameters()), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _refuse_device(device: torch.device, what: str) -> None:
    if device.type != "cpu":
        raise NotImplementedError(
            f"kvtier: KVTierCache moves CPU caches only, and {what} is on {device}; run the "
            "model on the CPU, or copy its cache to the CPU (and restored caches back) yourself")


def _token_row(tokens: Any) -> Any:
    """tokens as one row: a [1, n] batch (as forward takes it) is its row, 1-D is as given."""
    shape = getattr(tokens, "shape", None)
    if shape is None and isinstance(tokens, (list, tuple)) and tokens \
            and isinstance(tokens[0], (list, tuple)):
        shape = (len(tokens), len(tokens[0]))
    if shape is None or len(shape) != 2:
        return tokens
    if shape[0] != 1:
        raise errors.InvalidArgumentError(
            f"tokens: expected one sequence (1-D or [1, n]), got shape {tuple(shape)}")
    return tokens[0]


def _cache_kwarg(model: Any) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


@torch.inference_mode()
def forward(model: Any, input_ids: torch.Tensor, cache: Any = None,
            logits_to_keep: int = 1) -> tuple[torch.Tensor, Any]:
    """One forward pass of ``input_ids`` (1-D or [1, n]) after ``cache`` (None: from position 0);
    returns the logits of the last ``logits_to_keep`` positions ([1, k, vocab]) and the grown
    cache. Positions come from the cache's length. Works with both keyword spellings of the cache
    (``cache=`` in transformers 5.2x, ``past_key_values=`` before)."""
    from transformers import DynamicCache

    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    if cache is None:
        cache = DynamicCache()
    out = model(input_ids=input_ids, use_cache=True, logits_to_keep=logits_to_keep,
                **{_cache_kwarg(model): cache})
    new_cache = getattr(out, "cache", None)
    if new_cache is None:
        new_cache = out.past_key_values
    return out.logits, new_cache


@torch.inference_mode()
def greedy_decode(model: Any, first_logits: torch.Tensor, cache: Any,
                  max_new_tokens: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy generation from the logits of a prefill: returns the tokens and, for each, the
    logits it was chosen from ([vocab] each)."""
    tokens, logits = [], []
    step = first_logits[0, -1]
    for i in range(max_new_tokens):
        logits.append(step.clone())
        nxt = int(torch.argmax(step))
        tokens.append(nxt)
        if i + 1 == max_new_tokens:
            break
        out, cache = forward(model, torch.tensor([nxt]), cache)
        step = out[0, -1]
    return tokens, logits
