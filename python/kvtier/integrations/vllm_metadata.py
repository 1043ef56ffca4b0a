"""What the vLLM connector's two sides hand each other, and vLLM, between steps.

The scheduler side (``vllm_scheduler.py``) plans each step's loads and stores as ``Transfer``s
in a ``KvtierConnectorMetadata``, which vLLM passes to every worker; the worker side
(``vllm_worker.py``) answers through the step's output: ``KvtierWorkerMetadata`` names the steps
whose load errors are in it, and ``KvtierConnectorStats`` carries its timings and counters, which
vLLM also shows in /metrics through ``KvtierPromMetrics``. vLLM may carry all of these across
processes, so they hold plain data only. The connector itself and its documentation are in
``vllm.py``.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorMetadata,
                                                                KVConnectorWorkerMetadata)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (KVConnectorPromMetrics,
                                                                   KVConnectorStats)


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
    # Requests finished since the last step whose blocks vLLM keeps until the workers report
    # them in finished_sending (request_finished answered True): each worker reports such a
    # request once none of its saves is running, to come in this step, or withheld. The workers
    # report no other: vLLM has freed the others' blocks and forgotten them.
    delayed_frees: set[str] = dataclasses.field(default_factory=set)


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
