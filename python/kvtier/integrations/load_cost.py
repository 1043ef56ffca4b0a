"""Whether loading a cached prefix from kvtierd beats computing it again.

An engine connector asks ``LoadCostModel.decide`` before it offers cached blocks to the engine: a
load that would take longer than the engine needs to recompute the same tokens is skipped, so a
cache hit is never slower than a miss. Both sides of the comparison are measured in the running
engine, never assumed:

* a load costs one round trip (``observe_round_trip``: the lookups' times) plus its bytes over the
  bandwidth measured for the slowest tier the blocks lie in (``observe_load``: each load's bytes
  and wall time, by the tier of its blocks as the lookup reported them);
* a recompute costs the tokens times the time per token measured over the engine's forward passes
  that computed many tokens (``observe_compute``: prefill steps; a step of a few decode tokens says
  little about prefill).

Both are exponentially weighted means, so the model follows a disk that fills up or a machine that
gets busy. Until a side has a measurement the load is taken: the first loads are what measure it.
The model has no engine types and no I/O; it is shared by the connectors of any engine.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, Optional

# The tiers as lookups name them (kvtier.LookupResult.tiers), hottest first: the slowest tier of a
# load is the one of them ranked last. A name not listed ranks after them all.
TIER_RANK = {"gpu": 0, "host": 1, "nvme": 2, "remote": 3}


def slowest_tier(tiers: Iterable[str]) -> str:
    """The coldest of these tier names (a load from them takes as long as its slowest part)."""
    return max(tiers, key=lambda t: TIER_RANK.get(t, len(TIER_RANK)))


def _slowest(bytes_by_tier: Mapping[str, int]) -> str:
    return slowest_tier(t for t, b in bytes_by_tier.items() if b > 0)


@dataclasses.dataclass
class Decision:
    load: bool
    load_s: Optional[float]     # expected load time; None before any load was measured
    compute_s: Optional[float]  # expected recompute time; None before any step was measured
    reason: str  # "unmeasured", "faster", "slower" (skipped) or "probe" (slower, taken to measure)


class LoadCostModel:
    """Expected load and recompute times, from measurements (see the module docstring)."""

    def __init__(self, weight: float = 0.2, min_compute_tokens: int = 256,
                 probe_every: int = 64):
        if not 0 < weight <= 1:
            raise ValueError("weight must be in (0, 1]")
        self._weight = weight
        self._min_compute_tokens = min_compute_tokens
        # A tier whose loads are all skipped is never measured again, and would stay skipped after
        # it got fast (a disk no longer busy): one load in probe_every skipped ones of a tier is
        # taken anyway, to measure it. 0: never.
        self._probe_every = probe_every
        self._skipped: dict[str, int] = {}  # by tier name, since its last load
        self._seconds_per_byte: dict[str, float] = {}  # by tier name
        self._round_trip_s: Optional[float] = None
        self._seconds_per_token: Optional[float] = None
        self.loads_observed = 0
        self.steps_observed = 0

    def _mean(self, old: Optional[float], new: float) -> float:
        return new if old is None else old + self._weight * (new - old)

    def observe_load(self, bytes_by_tier: Mapping[str, int], seconds: float,
                     calls: int = 1) -> None:
        """One load: its bytes per tier name, its wall time, the round trips it took. The whole
        time goes to the slowest tier present (a mixed load is charged as if all of it came from
        there: an estimate that errs towards skipping, never towards a slow hit)."""
        total = sum(bytes_by_tier.values())
        if total <= 0 or seconds < 0:
            return
        tier = _slowest(bytes_by_tier)
        transfer_s = max(seconds - calls * (self._round_trip_s or 0.0), 0.0)
        self._seconds_per_byte[tier] = self._mean(self._seconds_per_byte.get(tier),
                                                  transfer_s / total)
        self.loads_observed += 1

    def observe_round_trip(self, seconds: float) -> None:
        """One call to kvtierd that moved no block bytes (a lookup): what every load pays on top
        of its bytes."""
        if seconds >= 0:
            self._round_trip_s = self._mean(self._round_trip_s, seconds)

    def observe_compute(self, tokens: int, seconds: float) -> None:
        """One forward pass that computed `tokens` tokens in `seconds` (load and save excluded).
        Passes of fewer than min_compute_tokens tokens are ignored: decode steps cost more per
        token than prefill, and would make recomputing look dearer than it is."""
        if tokens < self._min_compute_tokens or seconds <= 0:
            return
        self._seconds_per_token = self._mean(self._seconds_per_token, seconds / tokens)
        self.steps_observed += 1

    def expected_load_s(self, bytes_by_tier: Mapping[str, int]) -> Optional[float]:
        total = sum(bytes_by_tier.values())
        if total <= 0:
            return 0.0
        tier = _slowest(bytes_by_tier)
        # A tier not measured yet has no price (a host tier's says nothing of a disk's).
        per_byte = self._seconds_per_byte.get(tier)
        if per_byte is None:
            return None
        return (self._round_trip_s or 0.0) + total * per_byte

    def expected_compute_s(self, tokens: int) -> Optional[float]:
        if self._seconds_per_token is None:
            return None
        return tokens * self._seconds_per_token

    def decide(self, bytes_by_tier: Mapping[str, int], tokens: int) -> Decision:
        """Load `tokens` tokens' blocks (bytes per tier name), or compute them?"""
        load_s = self.expected_load_s(bytes_by_tier)
        compute_s = self.expected_compute_s(tokens)
        if load_s is None or compute_s is None:
            return Decision(True, load_s, compute_s, "unmeasured")
        tier = _slowest(bytes_by_tier) if any(bytes_by_tier.values()) else ""
        if load_s <= compute_s:
            self._skipped[tier] = 0
            return Decision(True, load_s, compute_s, "faster")
        skipped = self._skipped.get(tier, 0) + 1
        if self._probe_every and skipped >= self._probe_every:
            self._skipped[tier] = 0
            return Decision(True, load_s, compute_s, "probe")
        self._skipped[tier] = skipped
        return Decision(False, load_s, compute_s, "slower")

    def snapshot(self) -> dict[str, float]:
        """The model's estimates, for the connector's statistics."""
        out: dict[str, float] = {}
        if self._round_trip_s is not None:
            out["load_round_trip_us"] = self._round_trip_s * 1e6
        for tier, per_byte in sorted(self._seconds_per_byte.items()):
            if per_byte > 0:
                out[f"load_{tier}_gib_per_s"] = 1 / per_byte / (1 << 30)
        if self._seconds_per_token is not None:
            out["compute_us_per_token"] = self._seconds_per_token * 1e6
        return out
