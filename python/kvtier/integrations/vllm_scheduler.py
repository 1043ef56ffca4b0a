"""The scheduler side of the vLLM connector (``vllm.py`` documents the whole): the lookups made
as requests arrive, the prefix offered to vLLM and whether loading it beats recomputing it, the
loads and stores each step plans, the stores held back while a step's synchronous loads may
have failed, and the refresh of a finished request's chain.

``SchedulerSide`` is a mixin of ``KvtierConnector``, which vLLM builds once per role: its methods
run on the scheduler's thread only (the lookups on a thread of their own, ``prefix_lookups.py``).
It uses the state the connector sets up for both roles: ``_block_size``, ``_block_bytes``,
``_ns_id`` and ``_other_ns_ids`` (the namespaces of TP ranks 1..), ``_link``, ``_counts``,
``_try``.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Optional

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata, KVConnectorRole

import kvtier
from kvtier.integrations.extra_config import MAX_HOLD_S, ExtraConfig
from kvtier.integrations.load_cost import LoadCostModel
from kvtier.integrations.prefix_lookups import Found, PrefixLookups
from kvtier.integrations.vllm_metadata import KvtierConnectorMetadata, Transfer

logger = logging.getLogger("vllm.kvtier")  # vLLM's child logger, as in vllm.py

# How long a prefix found at lookup is held (kept from eviction) by default: a request is
# allocated and loaded within a few steps of its lookup unless the engine is full. One that waits
# longer (queued behind a full engine) is looked up again once half its hold has passed
# (_HOLD_SHARE_USED), and a preempted one when it is rescheduled. The hold expires on its own: a
# pin is not counted per holder, so it cannot be handed back without ending someone else's.
_DEFAULT_HOLD_S = 5.0

# The share of hold_s after which a lookup's answer is no longer offered: the other half covers
# the allocation and the load that follow the offer (a few steps).
_HOLD_SHARE_USED = 0.5

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


@dataclasses.dataclass
class _Tracked:
    request: Any
    block_ids: list[int]
    stored_blocks: int  # leading blocks already stored (or loaded: they are in kvtierd)
    # A store of its blocks went to the workers (in a step's metadata, not merely planned and
    # held back): its blocks are freed only once the workers report the saves done
    # (request_finished delays the free).
    stores_sent: bool = False


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


class SchedulerSide:
    """KvtierConnector's scheduler-side methods (see the module docstring)."""

    def _init_scheduler_side(self, extra: ExtraConfig) -> None:
        """The scheduler's settings (extra config) and state. Set up in either role: the
        connector's methods for both roles (shutdown) read some of it."""
        self._warn_unless_recompute()
        # Loads slower than the engine's recompute are skipped (load_cost.py), from the timings
        # the worker reports through vLLM's connector stats.
        self._skip_slow_loads = extra.flag("skip_slow_loads", True)
        # How long kvtierd keeps a prefix found at lookup from eviction, so that it is still
        # there when the worker loads it.
        self._hold_s = extra.seconds("hold_s", _DEFAULT_HOLD_S, maximum=MAX_HOLD_S)
        # How long a request is "not known yet" at most, before it runs as a miss.
        self._lookup_wait_s = extra.seconds("lookup_wait_s", _DEFAULT_LOOKUP_WAIT_S)
        self._cost = LoadCostModel()
        self._tracked: dict[str, _Tracked] = {}
        self._loads: list[Transfer] = []
        # Lookups in flight on their own thread (sent as requests arrive, or when first asked
        # about), and their answers (keys of the prefix found, tier of each) until the request
        # is allocated.
        self._lookups: Optional[PrefixLookups] = None
        self._found: dict[str, Found] = {}
        self._offered: dict[str, _Offer] = {}
        self._load_decisions: dict[str, bool] = {}  # _worth_loading's, until allocated
        # Blocks each request is loading into asynchronously, until the workers report it loaded
        # (finished_recving), even if it has finished since: the load runs on all the same; and
        # the requests whose load failed. vLLM asks again for a request whose load failed
        # entirely: it is recomputed, not loaded again (a load that fails for good would never
        # end).
        self._loading_blocks: dict[str, set[int]] = {}
        self._failed_loads: set[str] = set()
        # Of _loading_blocks, the requests that finished (aborted) while loading.
        self._finished_loading: set[str] = set()
        # The chain of each finished request whose saves are still running, in each TP rank's
        # namespace (the first rank's first), refreshed in kvtierd once the workers report them
        # done (update_connector_output).
        self._refresh_when_saved: dict[str, list[list[bytes]]] = {}
        # Requests request_finished answered True for since the last step: the next step's
        # metadata names them to the workers (delayed_frees), which report each in finished_sending
        # once its saves are done. The workers report no other request: vLLM frees the blocks of
        # a request it did not keep at once, and a report of it would name a request it no longer
        # knows.
        self._delayed_frees: set[str] = set()
        self._init_held_stores()

    def _warn_unless_recompute(self) -> None:
        policy = getattr(self._kv_transfer_config, "kv_load_failure_policy", "recompute")
        if self._role == KVConnectorRole.SCHEDULER and policy != "recompute":  # it applies it
            logger.warning("kvtier: kv_load_failure_policy is %r: a block that cannot be loaded "
                           "(kvtierd stopped or evicted it since the lookup) fails its request "
                           "instead of being recomputed; set \"kv_load_failure_policy\": "
                           "\"recompute\" in --kv-transfer-config", policy)

    def _init_held_stores(self) -> None:
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

    def _start_lookups(self) -> None:
        # The lookup thread owns the scheduler's link: the scheduler never waits on kvtierd.
        self._lookups = PrefixLookups(self._link.call, self._hold_s, self._lookup_wait_s,
                                      other_namespaces=self._other_ns_ids)
        # Connects at once, and logs now if kvtierd is not there.
        self._lookups.run_later(lambda: self._try(lambda c, ns: c.ping(), "connect"))

    def _keys(self, request: Any, num_blocks: int) -> list[bytes]:
        return kvtier.fold_foreign_keys(self._ns_id, list(request.block_hashes[:num_blocks]))

    def _other_keys(self, request: Any, num_blocks: int) -> list[list[bytes]]:
        """The same blocks' keys in the namespace of each TP rank but the first (none with one
        rank): Transfer.other_keys."""
        if not self._other_ns_ids:
            return []
        hashes = list(request.block_hashes[:num_blocks])
        return [kvtier.fold_foreign_keys(ns_id, hashes) for ns_id in self._other_ns_ids]

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
        if found is not None and self._outlived_hold(found):
            # Queued since its lookup, past the time kvtierd keeps its prefix: what it found may
            # be gone or moved to a slower tier. Looked up again (held again), decided again.
            del self._found[request.request_id]
            self._load_decisions.pop(request.request_id, None)
            self._submit(request, keys)
            found = None
        if found is None:
            found = self._take_lookup(request, keys)
            if found is None:
                return None, False
        found_keys, tiers = found.keys, found.tiers
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
        offer.load_async = offered > 0 and self._others_busy(request.request_id)
        return offered, offer.load_async

    def _outlived_hold(self, found: Found) -> bool:
        """Whether a lookup's answer is too old to offer: it found blocks and is past
        _HOLD_SHARE_USED of their hold (a miss holds nothing; with no hold, hold_s 0, nothing is
        kept for any answer and each is offered)."""
        return (bool(found.keys) and self._hold_s > 0
                and time.monotonic() - found.sent_at >= self._hold_s * _HOLD_SHARE_USED)

    def _others_busy(self, req_id: str) -> bool:
        """Whether a request other than req_id runs (or waits, preempted) or loads. A request
        resumed after a preemption is still tracked itself: it is not "something else"."""
        return (any(r != req_id for r in self._tracked)
                or any(r != req_id for r in self._loading_blocks))

    def _take_lookup(self, request: Any, keys: list[bytes]) -> Optional[Found]:
        """request's lookup answer (kept in _found until the request is allocated), or None while
        it is not in; submits the lookup if it was not (a vLLM without on_new_request, a
        request asked about again after its answer was used)."""
        req_id = request.request_id
        if not self._lookups.submitted(req_id):
            self._submit(request, keys)
        idle = not self._others_busy(req_id)
        answer = self._lookups.take(req_id, _IDLE_LOOKUP_WAIT_S if idle else 0.0)
        self._observe_round_trips()
        if answer is None:
            return None
        self._counts["lookups"] += 1
        self._counts["lookup_errors"] += int(answer.failed)
        self._found[req_id] = answer
        return answer

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
            step=self._steps_built, delayed_frees=self._delayed_frees)
        self._loads = []
        self._delayed_frees = set()
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
        for t in meta.stores:
            tracked = self._tracked.get(t.req_id)  # None: finished, its free delayed already
            if tracked is not None:
                tracked.stores_sent = True
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
            tracked.stores_sent = True
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
            if req_id in self._finished_loading:  # vLLM frees its blocks now
                self._finished_loading.discard(req_id)
                self._failed_loads.discard(req_id)
                self._refresh(self._refresh_when_saved.pop(req_id, None))
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
        """Whether vLLM must keep the request's blocks until the workers report it saved
        (finished_sending): True when a store of its blocks went to the workers, or is held back
        to go later; the workers are told so in the next step (delayed_frees), and report it
        once those saves are done. A store planned, held back and dropped since (a load error,
        a preemption, an output that never came) leaves nothing to wait for: False."""
        req_id = request.request_id
        tracked = self._tracked.pop(req_id, None)
        for state in (self._offered, self._found, self._load_decisions):
            state.pop(req_id, None)
        if self._lookups is not None:
            self._lookups.forget(req_id)
        # Saves run after their step: blocks some of which are being saved are freed once the
        # workers report the request (get_finished), and then its chain is refreshed.
        saving = (tracked is not None and tracked.stores_sent) or any(
            h.transfer.req_id == req_id for h in (*self._held, *self._released))
        if saving:
            blocks = tracked.stored_blocks if tracked is not None else 0
            self._refresh_when_saved[req_id] = [
                self._keys(request, blocks), *self._other_keys(request, blocks)]
        if req_id in self._loading_blocks:
            # Finished while its asynchronous load runs (WAITING_FOR_REMOTE_KVS): vLLM keeps its
            # blocks itself until the workers report it loaded, and frees them then; were it
            # also reported saved, vLLM would free them while the load still writes them, then
            # fail on the load's report of a request it no longer knows. No save of it runs: a
            # request loads asynchronously when it is admitted, new or resumed after a
            # preemption, whose saves were waited for (handle_preemptions) and whose held
            # stores were dropped. The load still counts as running until it is reported.
            self._finished_loading.add(req_id)
            return False, None
        self._failed_loads.discard(req_id)
        if saving:
            self._delayed_frees.add(req_id)
        return saving, None
