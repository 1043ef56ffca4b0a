"""The dashboard at / in a real headless Chromium (Debian's `chromium`), against a kvtierd that
samples its history every second: the page loads with nothing on the console and no error of its
own, each chart holds the values /stats/history holds for the keys it names, the charts a person
expects are there and drawn, and a screenshot is kept for a person to look at.

Chromium runs twice, each time a fresh headless process with a profile of the test's: --dump-dom
after a virtual-time budget (the page's fetches and timers run; the DOM then carries each chart's
data-series), with --enable-logging=stderr, which prints every console message and uncaught error
as a CONSOLE line; and --screenshot. Without chromium the test skips, except under CI (the CI
environment variable set, as scripts/test.sh sets it), where it fails: there it is a dependency
(scripts/install-deps.sh installs it).
"""
import json
import math
import os
import pathlib
import shutil
import subprocess
import time
from html.parser import HTMLParser

import pytest

from helpers import RawClient, http_get
from kvtierd_process import REPO, Daemon
from nvme_helpers import get_each, lookup_each, put_blocks, register_ns

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_CHROMIUM = "needs Debian's chromium, which scripts/install-deps.sh installs"

BLOCK_BYTES = 256 << 10
BLOCKS = 96  # 2 x 24 MiB through a 32 MiB host tier: the oldest are demoted to NVMe
ARTIFACTS = pathlib.Path(os.environ.get("KVTIER_TEST_ARTIFACTS", REPO / "build" / "test-artifacts"))
CHROMIUM_TIMEOUT_S = 120
# Virtual time the page gets before its DOM is read: its first fetches, and a refresh or two.
VIRTUAL_TIME_MS = "6000"
# The charts, and the keys (paths in a sample) each must plot for the traffic below.
EXPECTED_KEYS = {
    "chart-hit-ratio": {"hit_ratio", "tiers.host.hit_ratio", "tiers.nvme.hit_ratio"},
    "chart-namespace-hit-ratio": set(),  # the namespaces' refs: checked in the test
    "chart-tier-use": {"tiers.host.used_ratio", "tiers.nvme.used_ratio"},
    "chart-throughput": {"commands_per_s", "requests.lookup.per_s", "requests.get.per_s",
                         "requests.put.per_s"},
    "chart-latency-p50": {"requests.lookup.p50_us", "requests.get.p50_us", "requests.put.p50_us"},
    "chart-latency-p99": {"requests.lookup.p99_us", "requests.get.p99_us", "requests.put.p99_us"},
    "chart-evictions": {"tiers.host.evictions", "tiers.host.demotions"},
}


def history(daemon):
    return json.loads(http_get(daemon, "/stats/history"))


def wait_for_samples(daemon, more):
    """Waits until `more` samples were taken after now (the sampler's clock, not a guess)."""
    start = len(history(daemon)["samples"])
    deadline = time.monotonic() + 30
    while len(history(daemon)["samples"]) < start + more:
        assert time.monotonic() < deadline, "kvtierd took no history sample for 30 s"
        time.sleep(0.1)


def traffic(daemon):
    """Three phases, a sample apart: puts and lookups that all hit; a second namespace whose puts
    push the first's blocks to NVMe (evictions, demotions), and lookups that hit in both tiers and
    miss; reads of blocks on NVMe."""
    with RawClient(daemon.unix) as c:
        a = register_ns(c, "dashboard-a", BLOCK_BYTES)
        b = register_ns(c, "dashboard-b", BLOCK_BYTES)
        put_blocks(c, a, 1, range(BLOCKS), BLOCK_BYTES)
        assert all(lookup_each(c, a, 1, range(BLOCKS)))
        wait_for_samples(daemon, 1)
        put_blocks(c, b, 2, range(BLOCKS), BLOCK_BYTES)
        tiers = lookup_each(c, a, 1, range(BLOCKS))
        assert "nvme" in tiers and "host" in tiers, tiers
        lookup_each(c, b, 2, range(BLOCKS, 2 * BLOCKS))  # never put: misses
        wait_for_samples(daemon, 1)
        on_nvme = [n for n, t in zip(range(BLOCKS), tiers) if t == "nvme"][:8]
        assert all(get_each(c, a, 1, on_nvme))
        lookup_each(c, b, 2, range(BLOCKS // 2))
        # The page names namespaces by their refs (a hash of the id): this admin session's
        # KVT.STATS has both.
        refs = {n["id"]: n["ref"] for n in json.loads(c.call("KVT.STATS"))["namespaces"]}
    wait_for_samples(daemon, 2)
    return refs[a], refs[b]


class Figures(HTMLParser):
    """Each <figure class="chart">: its id, data-series and how many lines its SVG draws."""

    def __init__(self):
        super().__init__()
        self.charts = {}
        self.body = {}
        self._open = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "body":
            self.body = attrs
        if tag == "figure" and "chart" in (attrs.get("class") or "").split():
            self._open = attrs["id"]
            self.charts[self._open] = {"series": json.loads(attrs["data-series"]), "paths": 0,
                                       "points": 0}
        elif self._open and tag in ("path", "circle"):
            self.charts[self._open]["paths" if tag == "path" else "points"] += 1

    def handle_endtag(self, tag):
        if tag == "figure":
            self._open = None


def chromium(tmp_path, *args):
    """Runs headless Chromium with a profile of its own; returns (stdout, stderr)."""
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.iterdir()))}"
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-extensions", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
           "--enable-logging=stderr", "--v=0", f"--virtual-time-budget={VIRTUAL_TIME_MS}", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, f"{cmd}\nexit {done.returncode}\n{done.stderr}"
    return done.stdout, done.stderr


def value_at(sample, key):
    value = sample
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """The daemon after the traffic, the page's DOM and console as Chromium saw them, and the
    history as /stats/history served it after that."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail(NO_CHROMIUM + " (CI runs this test: it may not skip)", pytrace=False)
        pytest.skip(NO_CHROMIUM + " (under CI its absence fails)")
    tmp = tmp_path_factory.mktemp("dashboard")
    daemon = Daemon(tmp_path_factory.mktemp("kvtierd"), host_bytes="32MiB", slab_bytes="8MiB",
                    nvme_bytes="128MiB", extra_config="metrics:\n  history_interval_ms: 1000\n")
    daemon.start()
    try:
        namespaces = traffic(daemon)
        dom, console = chromium(tmp, "--dump-dom", daemon.http_url + "/")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        screenshot = ARTIFACTS / "dashboard.png"
        screenshot.unlink(missing_ok=True)
        chromium(tmp, f"--screenshot={screenshot}", "--window-size=1400,1600",
                 "--hide-scrollbars", daemon.http_url + "/")
        after = history(daemon)
    finally:
        rc = daemon.stop()
    assert rc == 0, daemon.log()
    print(f"dashboard screenshot: {screenshot}")
    figures = Figures()
    figures.feed(dom)
    return {"figures": figures, "console": console, "history": after, "namespaces": namespaces,
            "screenshot": screenshot}


def test_the_page_loads_without_console_messages_or_errors(dashboard):
    console = [line for line in dashboard["console"].splitlines() if ":CONSOLE" in line]
    assert not console, "\n".join(console)
    body = dashboard["figures"].body
    assert body.get("data-errors") == "", body.get("data-errors")
    assert int(body.get("data-history-renders", "0")) >= 1, body


def test_every_chart_holds_the_values_the_history_holds(dashboard):
    samples = {s["unix_ms"]: s for s in dashboard["history"]["samples"]}
    charts = dashboard["figures"].charts
    assert set(charts) == set(EXPECTED_KEYS), sorted(charts)
    plotted = 0
    for chart_id, chart in charts.items():
        for series in chart["series"]:
            times = [t for t, _ in series["points"]]
            # The samples the page had: the oldest ones the daemon has now, none left out.
            assert times == sorted(samples)[:len(times)], (chart_id, series["key"])
            for t, value in series["points"]:
                expected = value_at(samples[t], series["key"])
                if expected is None:
                    assert value is None, (chart_id, series["key"], t, value)
                else:
                    assert value is not None and math.isclose(value, expected, rel_tol=1e-12), \
                        (chart_id, series["key"], t, value, expected)
                    plotted += 1
    assert plotted > 0


def test_the_charts_a_person_expects_are_drawn(dashboard):
    charts = dashboard["figures"].charts
    a, b = dashboard["namespaces"]
    assert len(dashboard["history"]["samples"]) >= 4
    for chart_id, keys in EXPECTED_KEYS.items():
        chart = charts[chart_id]
        drawn = {s["key"] for s in chart["series"]}
        assert keys <= drawn, (chart_id, sorted(drawn))
        assert chart["paths"] + chart["points"] >= len(chart["series"]) > 0, (chart_id, chart)
    names = {s["key"]: s["name"] for s in charts["chart-namespace-hit-ratio"]["series"]}
    # Named by their labels (the model, dtype and parallel rank KVT.REGISTER was given).
    assert names.get(f"namespaces.{a}.hit_ratio", "").startswith("dashboard-a "), names
    assert names.get(f"namespaces.{b}.hit_ratio", "").startswith("dashboard-b "), names
    # The traffic had hits and misses: some interval's overall hit ratio lies strictly between.
    overall = next(s for s in charts["chart-hit-ratio"]["series"] if s["key"] == "hit_ratio")
    assert any(v is not None and 0 < v < 1 for _, v in overall["points"]), overall
    moves = {s["key"]: s for s in charts["chart-evictions"]["series"]}
    assert any(v for _, v in moves["tiers.host.demotions"]["points"])


def test_a_screenshot_is_kept(dashboard):
    shot = dashboard["screenshot"]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", shot
    assert len(data) > 20_000, f"{shot}: {len(data)} bytes, too small to hold the charts"


def test_with_the_history_off_the_endpoint_says_so(tmp_path_factory):
    daemon = Daemon(tmp_path_factory.mktemp("kvtierd"),
                    extra_config="metrics:\n  history: false\n  histograms: false\n")
    daemon.start()
    try:
        assert history(daemon) == {"enabled": False, "samples": []}
        assert "/stats/history" in http_get(daemon, "/")
    finally:
        assert daemon.stop() == 0, daemon.log()
