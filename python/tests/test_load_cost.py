"""kvtier.integrations.load_cost: the load-or-recompute decision of the engine connectors, from
measured load and compute times. No engine, no daemon."""
import pytest

from kvtier.integrations.load_cost import LoadCostModel

HOST, NVME = "host", "nvme"
MIB = 1 << 20


def test_unmeasured_loads_are_taken_they_are_what_measures_them():
    m = LoadCostModel()
    d = m.decide({HOST: 64 * MIB}, tokens=4096)
    assert d.load and d.reason == "unmeasured" and d.load_s is None and d.compute_s is None
    m.observe_load({HOST: 64 * MIB}, seconds=0.01)
    assert m.decide({HOST: 64 * MIB}, tokens=4096).reason == "unmeasured"  # no compute yet
    m.observe_compute(tokens=4096, seconds=1.0)
    assert m.decide({HOST: 64 * MIB}, tokens=4096).reason == "faster"
    # A tier never loaded from has no price of its own: the host tier's says nothing of a disk.
    assert m.decide({HOST: MIB, NVME: MIB}, tokens=4096).reason == "unmeasured"


def test_a_load_slower_than_the_recompute_is_skipped_and_a_faster_one_taken():
    m = LoadCostModel()
    # A slow tier: 64 MiB in 2 s (32 MiB/s). The engine computes 4,096 tokens in 0.5 s.
    m.observe_load({NVME: 64 * MIB}, seconds=2.0)
    m.observe_compute(tokens=4096, seconds=0.5)
    slow = m.decide({NVME: 64 * MIB}, tokens=4096)
    assert not slow.load and slow.reason == "slower"
    assert slow.load_s == pytest.approx(2.0) and slow.compute_s == pytest.approx(0.5)
    # The same prefix is worth loading where the engine is slower than the disk.
    assert m.decide({NVME: 8 * MIB}, tokens=4096).load


def test_a_mixed_load_is_priced_at_its_slowest_tier():
    m = LoadCostModel()
    m.observe_load({HOST: 64 * MIB}, seconds=0.01)
    m.observe_load({NVME: 64 * MIB}, seconds=1.0)
    m.observe_compute(tokens=1024, seconds=0.1)
    assert m.decide({HOST: 32 * MIB}, tokens=1024).load
    assert not m.decide({HOST: 31 * MIB, NVME: MIB * 33}, tokens=1024).load


def test_decode_steps_do_not_price_the_recompute():
    m = LoadCostModel(min_compute_tokens=256)
    m.observe_compute(tokens=8, seconds=0.05)  # a decode step: dear per token
    assert m.expected_compute_s(4096) is None
    m.observe_compute(tokens=2048, seconds=0.2)
    assert m.expected_compute_s(4096) == pytest.approx(0.4)


def test_estimates_follow_the_measurements():
    m = LoadCostModel(weight=0.5)
    m.observe_compute(tokens=1000, seconds=1.0)
    m.observe_compute(tokens=1000, seconds=3.0)
    assert m.expected_compute_s(1000) == pytest.approx(2.0)
    snap = m.snapshot()
    assert snap["compute_us_per_token"] == pytest.approx(2000)


def test_a_skipped_tier_is_probed_now_and_then_so_it_can_recover():
    m = LoadCostModel(probe_every=4)
    m.observe_load({NVME: 64 * MIB}, seconds=2.0)
    m.observe_compute(tokens=4096, seconds=0.5)
    reasons = [m.decide({NVME: 64 * MIB}, tokens=4096).reason for _ in range(8)]
    assert reasons == ["slower"] * 3 + ["probe"] + ["slower"] * 3 + ["probe"]
    # The disk got fast: the probes measure it, and its loads are taken again.
    for _ in range(20):
        m.observe_load({NVME: 64 * MIB}, seconds=0.05)
    assert m.decide({NVME: 64 * MIB}, tokens=4096).reason == "faster"


def test_each_load_pays_the_round_trip_the_lookups_measure():
    m = LoadCostModel()
    m.observe_round_trip(0.001)
    m.observe_load({HOST: 64 * MIB}, seconds=0.065)  # 1 ms of round trip, 64 ms of bytes
    assert m.snapshot()["load_round_trip_us"] == pytest.approx(1000)
    assert m.snapshot()["load_host_gib_per_s"] == pytest.approx(1 / 0.064 / 16)
    assert m.expected_load_s({HOST: 32 * MIB}) == pytest.approx(0.033)
    assert m.expected_load_s({HOST: 0}) == 0.0


def test_bad_weights_are_refused():
    with pytest.raises(ValueError):
        LoadCostModel(weight=0)
