"""The latency histograms of a real kvtierd with an NVMe tier: /metrics passes `promtool check
metrics`, every kvtier_request_duration_seconds and kvtier_tier_move_duration_seconds series is a
well-formed histogram (cumulative `le` buckets, +Inf equal to _count), the labels say which op,
path and tier a command was, /stats and INFO count the same commands and moves, and
metrics.histograms: false leaves only the moved bytes."""
import re
import shutil
import subprocess
import time

import pytest

from helpers import RawClient, http_get, parse_metrics, wait_for
from kvtierd_process import Daemon
from nvme_helpers import get_each, lookup_each, put_blocks, register_ns, tier

BLOCK_BYTES = 256 << 10
BLOCKS = 200  # 50 MiB through a 32 MiB host tier: the oldest are demoted to NVMe
REQUEST = "kvtier_request_duration_seconds"
MOVE = "kvtier_tier_move_duration_seconds"
MOVED_BYTES = "kvtier_tier_moved_bytes_total"


def traffic(daemon):
    """Puts that spill to NVMe, lookups of every block and reads of some on NVMe (they wait for
    the mover to bring them up); returns (/metrics text, stats before it, stats after, INFO)."""
    with RawClient(daemon.unix) as c:
        ns = register_ns(c, "metrics-histograms", BLOCK_BYTES)
        put_blocks(c, ns, 1, range(BLOCKS), BLOCK_BYTES)
        tiers = lookup_each(c, ns, 1, range(BLOCKS))
        assert "nvme" in tiers and "host" in tiers, tiers
        on_nvme = [n for n, t in zip(range(BLOCKS), tiers) if t == "nvme"][:8]
        assert all(get_each(c, ns, 1, on_nvme))
        settle_moves(c)
        before = c.stats()
        text = http_get(daemon, "/metrics")
        after = stats_counting(c, parse_metrics(text))
        info = c.call("INFO", "kvtier").decode()
    return text, before, after, info


def settle_moves(c, quiet_s=0.3, timeout_s=10.0):
    """Waits until the mover has counted no move for quiet_s: a move's latency is recorded just
    before its tier counter is bumped, so a scrape during a move may find one more in the
    histogram than the stats document taken after it."""
    def moves():
        stats = c.stats()
        return tier(stats, "host")["demotions"], tier(stats, "nvme")["promotions"]
    deadline = time.monotonic() + timeout_s
    last, since = moves(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = moves()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
    raise AssertionError(f"the mover kept moving blocks for {timeout_s} s: {last}")


def stats_counting(c, samples):
    """A stats document taken once its tier counters count every move the scrape does (a move
    is recorded, moved bytes and histogram, just before its tier counter is bumped), or the last
    one after 5 s. Moves are counted by their bytes, there with histograms on or off."""
    demoted = samples.get((MOVED_BYTES, 'from="host",to="nvme"'), 0) // BLOCK_BYTES
    promoted = samples.get((MOVED_BYTES, 'from="nvme",to="host"'), 0) // BLOCK_BYTES
    last = {}

    def caught_up():
        last["stats"] = c.stats()
        return (tier(last["stats"], "host")["demotions"] >= demoted and
                tier(last["stats"], "nvme")["promotions"] >= promoted)
    wait_for(caught_up, timeout_s=5.0)
    return last["stats"]


def series(samples, name):
    """{labels without le: {le: value}} of one histogram's _bucket samples."""
    out = {}
    for (metric, labels), value in samples.items():
        if metric != name + "_bucket":
            continue
        le = re.search(r',le="([^"]+)"$', labels)
        assert le, labels
        out.setdefault(labels[:le.start()], {})[le.group(1)] = value
    return out


def check_histogram(samples, name, labels, buckets):
    counts = [buckets[le] for le in sorted(buckets, key=lambda le: float(le))]
    assert len(counts) == 26 and list(buckets)[-1] == "+Inf", (name, labels, list(buckets))
    assert counts == sorted(counts), (name, labels, counts)  # cumulative
    assert counts[-1] == samples[(name + "_count", labels)], (name, labels)
    assert samples[(name + "_sum", labels)] >= 0


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    daemon = Daemon(tmp_path_factory.mktemp("kvtierd"), host_bytes="32MiB", slab_bytes="8MiB",
                    nvme_bytes="128MiB")
    daemon.start()
    try:
        result = traffic(daemon)
    finally:
        rc = daemon.stop()
    assert rc == 0, daemon.log()
    return result


def test_metrics_pass_promtool(scraped):
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: scripts/install-deps.sh installs Debian's prometheus"
    checked = subprocess.run([promtool, "check", "metrics"], input=scraped[0], text=True,
                             capture_output=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"# TYPE {REQUEST} histogram" in scraped[0]
    assert f"# TYPE {MOVE} histogram" in scraped[0]


def test_metrics_histograms_are_well_formed_and_labelled(scraped):
    samples = parse_metrics(scraped[0])
    requests = series(samples, REQUEST)
    for labels, buckets in requests.items():
        check_histogram(samples, REQUEST, labels, buckets)
    for labels in ('op="put",path="inline",tier="host"', 'op="lookup",path="inline",tier="nvme"',
                   'op="get",path="inline",tier="nvme"'):
        assert labels in requests, sorted(requests)
    moves = series(samples, MOVE)
    for labels, buckets in moves.items():
        check_histogram(samples, MOVE, labels, buckets)
    assert set(moves) == {'kind="demotion",from="host",to="nvme"',
                          'kind="promotion",from="nvme",to="host"'}


def test_metrics_moves_agree_with_the_tier_counters(scraped):
    text, before, after, _ = scraped
    samples = parse_metrics(text)
    demoted = samples[(MOVE + "_count", 'kind="demotion",from="host",to="nvme"')]
    promoted = samples[(MOVE + "_count", 'kind="promotion",from="nvme",to="host"')]
    # Bounded by the stats documents around the scrape: the one before (the mover let settle
    # first), and the one after once it counts what the histograms do (stats_counting).
    assert tier(before, "host")["demotions"] <= demoted <= tier(after, "host")["demotions"]
    assert tier(before, "nvme")["promotions"] <= promoted <= tier(after, "nvme")["promotions"]
    assert promoted >= 8
    assert samples[(MOVED_BYTES, 'from="host",to="nvme"')] == demoted * BLOCK_BYTES
    assert samples[(MOVED_BYTES, 'from="nvme",to="host"')] == promoted * BLOCK_BYTES


def test_metrics_stats_and_info_count_the_same_commands(scraped):
    text, before, after, info = scraped
    samples = parse_metrics(text)
    for doc in (before, after):  # nothing timed ran between them: KVT.STATS is not timed
        assert {(r["op"], r["path"], r["tier"]): r["count"] for r in doc["requests"]} == {
            tuple(re.findall(r'"([^"]+)"', labels)): value
            for (metric, labels), value in samples.items() if metric == REQUEST + "_count"}
    for r in after["requests"]:
        assert 0 < r["p50_us"] <= r["p99_us"], r
        line = f'request_{r["op"]}_{r["path"]}_{r["tier"]}:count={r["count"]},'
        assert line in info, info
    assert any(m["kind"] == "demotion" and m["bytes"] > 0 for m in after["moves"]), after["moves"]


def test_metrics_histograms_off_keeps_only_moved_bytes(tmp_path):
    daemon = Daemon(tmp_path, host_bytes="32MiB", slab_bytes="8MiB", nvme_bytes="128MiB",
                    extra_config="metrics:\n  histograms: false\n")
    daemon.start()
    try:
        text, _, after, _ = traffic(daemon)
    finally:
        rc = daemon.stop()
    assert rc == 0, daemon.log()
    samples = parse_metrics(text)
    assert not any(m.startswith((REQUEST + "_", MOVE + "_")) for m, _ in samples)
    assert samples[(MOVED_BYTES, 'from="host",to="nvme"')] > 0
    assert after["requests"] == []
