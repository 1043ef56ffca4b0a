"""Prefix lookups made as requests arrive, on a thread of their own, for an engine's scheduler.

A scheduler that looks a request up when it first considers it pays a round trip to kvtierd on
its own thread, or, if it sends the lookups of a step together, one engine step of delay for
every request (asked once "not known yet", answered at the next step). Looking the request up
when it arrives (vLLM's ``on_new_request``) removes both: by the time the scheduler considers
the request, the answer is usually there, and the scheduler never waits on kvtierd unless it
chooses to (``take``'s ``wait_s``, when nothing else would run meanwhile).

The lookups submitted while one round trip is in flight go together in the next one, so a burst
of arrivals costs one round trip, not one per request. A lookup that fails (kvtierd unreachable
or answering an error) is answered as a miss, marked ``failed``; so is one not answered within
``answer_within_s`` of its submit (kvtierd alive but hung: its requests would otherwise wait for
the connection's timeout), whose answer is then thrown away when it comes.

An engine whose blocks lie in several namespaces (vLLM with tensor parallelism: each rank stores
its own pages under its own namespace) submits a request's chain in each of them; the answer is
the prefix every one of them holds, each block priced by the slowest tier any of them holds it
in, for a load takes as long as its slowest rank. Each namespace costs one more round trip of
the batch, not one per request.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Optional, Sequence

import kvtier
from kvtier.integrations.load_cost import slowest_tier

logger = logging.getLogger("vllm.kvtier")

# call(what, fn) runs fn(client, namespace) on the caller's connection to kvtierd, or raises
# kvtier.KvtierError (the connection's owner logs failures).
Call = Callable[[str, Callable[[kvtier.Client, kvtier.Namespace], Any]], Any]


@dataclasses.dataclass
class Found:
    """A request's lookup: the keys of the leading blocks kvtierd holds and the tier of each."""
    keys: list[bytes]
    tiers: list[str]
    failed: bool = False  # the lookup failed: answered as a miss
    # time.monotonic() when its round trip was sent: kvtierd's hold of the prefix found began
    # after it, and ends hold_s after that at the earliest
    sent_at: float = 0.0


class PrefixLookups:
    """Lookups of submitted chains on a thread that owns ``call``'s connection from now on: in
    ``call``'s namespace, and in each of ``other_namespaces`` (ids: a lookup of a namespace
    nobody registered is a miss, not an error)."""

    def __init__(self, call: Call, hold_s: float, answer_within_s: float = float("inf"),
                 name: str = "kvtier-lookup", other_namespaces: Sequence[bytes] = ()):
        self._call = call
        self._other_namespaces = list(other_namespaces)
        self._hold_s = hold_s
        self._answer_within_s = answer_within_s
        self._submitted_at: dict[str, float] = {}  # of each lookup known, by request
        self._late_logged = False
        self._cond = threading.Condition()
        self._queued: dict[str, list[list[bytes]]] = {}
        self._in_flight: set[str] = set()
        self._answers: dict[str, Found] = {}
        self._jobs: list[Callable[[], Any]] = []
        self._round_trips: list[float] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, req_id: str, keys: list[bytes],
               other_keys: Sequence[list[bytes]] = ()) -> None:
        """Looks keys up (a request's chain) with the next round trip, and other_keys[i], the
        same blocks' chain in other_namespaces[i]; a new submit of the same request replaces its
        earlier one."""
        if len(other_keys) != len(self._other_namespaces):
            raise ValueError(f"{len(other_keys)} other chains for "
                             f"{len(self._other_namespaces)} other namespaces")
        with self._cond:
            self._answers.pop(req_id, None)
            self._queued[req_id] = [keys, *other_keys]
            self._submitted_at[req_id] = time.monotonic()
            self._cond.notify_all()

    def submitted(self, req_id: str) -> bool:
        """Whether req_id was submitted and its answer not taken yet."""
        with self._cond:
            return self._known(req_id)

    def take(self, req_id: str, wait_s: float = 0.0) -> Optional[Found]:
        """req_id's answer, once (None while it is not in, after waiting up to wait_s for it);
        a failed miss once the lookup is answer_within_s old (it is forgotten)."""
        with self._cond:
            if wait_s > 0:
                self._cond.wait_for(
                    lambda: req_id in self._answers or not self._known(req_id), wait_s)
            answer = self._answers.pop(req_id, None)
            if answer is not None or not self._known(req_id):
                self._submitted_at.pop(req_id, None)
                return answer
            waited_s = time.monotonic() - self._submitted_at[req_id]
            if waited_s < self._answer_within_s:
                return None
            self._forget(req_id)
            late_logged, self._late_logged = self._late_logged, True
        if not late_logged:
            logger.warning("kvtier: a lookup was not answered within %.3f s; its request runs "
                           "without the cache (further late lookups are not logged)",
                           self._answer_within_s)
        return Found([], [], failed=True)

    def forget(self, req_id: str) -> None:
        """Drops req_id's lookup and answer (the request ended): an answer still in flight is
        thrown away when it comes."""
        with self._cond:
            self._forget(req_id)

    def run_later(self, job: Callable[[], Any]) -> None:
        """Runs job on the lookup thread, before the next round trip (it owns the connection)."""
        with self._cond:
            self._jobs.append(job)
            self._cond.notify_all()

    def round_trips(self) -> list[float]:
        """The seconds of each successful round trip since the last call."""
        with self._cond:
            taken, self._round_trips = self._round_trips, []
        return taken

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _forget(self, req_id: str) -> None:
        self._queued.pop(req_id, None)
        self._in_flight.discard(req_id)
        self._answers.pop(req_id, None)
        self._submitted_at.pop(req_id, None)

    def _known(self, req_id: str) -> bool:
        return req_id in self._queued or req_id in self._in_flight or req_id in self._answers

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queued or self._jobs or self._closed)
                if self._closed:
                    return
                jobs, self._jobs = self._jobs, []
                batch, self._queued = self._queued, {}
                self._in_flight.update(batch)
            for job in jobs:
                self._guarded(job)
            if batch:
                self._look_up(batch)

    def _look_up(self, batch: dict[str, list[list[bytes]]]) -> None:
        chains = list(batch.values())

        def look_up(c: kvtier.Client, ns: kvtier.Namespace) -> list[list[Any]]:
            # One call per namespace, each holding what it finds there: every namespace's
            # blocks must stay until they are loaded.
            return [c.lookup_many(n, [chain[i] for chain in chains], self._hold_s)
                    for i, n in enumerate([ns, *self._other_namespaces])]

        sent_at = time.monotonic()
        started = time.perf_counter()
        answers = self._guarded(lambda: self._call("lookup", look_up))
        # The whole batch's time, all namespaces': what a lookup costs a request.
        seconds = time.perf_counter() - started
        with self._cond:
            if answers is not None:
                self._round_trips.append(seconds)
            for j, (req_id, request_chains) in enumerate(batch.items()):
                if req_id not in self._in_flight:
                    continue  # forgotten meanwhile
                self._in_flight.discard(req_id)
                if req_id in self._queued:
                    continue  # submitted again meanwhile: that lookup answers
                answer = (_common(request_chains[0], [a[j] for a in answers])
                          if answers is not None else Found([], [], failed=True))
                answer.sent_at = sent_at
                self._answers[req_id] = answer
            self._cond.notify_all()

    @staticmethod
    def _guarded(job: Callable[[], Any]) -> Any:
        """job(), or None when it raised: a failed lookup is a miss, never the engine's error."""
        try:
            return job()
        except kvtier.KvtierError:
            return None  # logged by the connection's owner
        except Exception:  # noqa: BLE001
            logger.exception("kvtier: a lookup failed")
            return None


def _common(keys: list[bytes], found: list[Any]) -> Found:
    """The prefix every namespace holds (found: each one's LookupResult), by keys (the first
    namespace's chain), each block at the slowest of its namespaces' tiers."""
    if len(found) == 1:
        return Found(keys[:found[0].prefix], list(found[0].tiers))
    prefix = min(f.prefix for f in found)
    tiers = [f.tiers[:prefix] for f in found]
    return Found(keys[:prefix], [slowest_tier(position) for position in zip(*tiers)])
