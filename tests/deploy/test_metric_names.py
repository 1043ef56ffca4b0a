"""Every kvtier_ metric that deploy/grafana/kvtier.json and deploy/prometheus/alerts.yml query is
exported by a real kvtierd: a release daemon with a host and an NVMe tier, scraped after puts that
spill to NVMe, lookups and reads (inline, and through shared memory). A renamed or misspelt metric would leave a panel empty or an alert
silent without any error anywhere else."""
import os
import pathlib

import pytest

from helpers import RawClient, http_get
from kvtierd_process import Daemon
from nvme_helpers import get_each, key, lookup_each, put_blocks, register_ns
from promql_names import dashboard_expressions, load_expressions, missing, used_names

REPO = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "kvtier.json"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
BLOCK_BYTES = 256 << 10

EXPOSITION = """\
# TYPE kvtier_puts_total counter
kvtier_puts_total 3
# TYPE kvtier_tier_device gauge
kvtier_tier_device{tier="nvme",counter="reads"} 2
# TYPE kvtier_get_seconds histogram
kvtier_get_seconds_bucket{le="0.001"} 1
kvtier_get_seconds_bucket{le="+Inf"} 1
kvtier_get_seconds_sum 0.0005
kvtier_get_seconds_count 1
"""


def test_checker_passes_names_that_are_exported():
    exprs = ["rate(kvtier_puts_total[5m])",
             'rate(kvtier_tier_device{instance=~"$instance",tier="nvme",counter="reads"}[5m])',
             'kvtier_tier_device{counter="$counter"}',
             "histogram_quantile(0.99, sum by (le) (rate(kvtier_get_seconds_bucket[5m])))",
             "rate(kvtier_get_seconds_sum[5m]) / rate(kvtier_get_seconds_count[5m])"]
    assert missing(exprs, EXPOSITION) == []


def test_checker_reports_a_made_up_name():
    assert missing(["rate(kvtier_made_up_total[5m]) + rate(kvtier_puts_total[5m])"],
                   EXPOSITION) == ["kvtier_made_up_total"]


def test_checker_reports_a_histogram_named_without_its_suffix():
    assert missing(["rate(kvtier_get_seconds[5m])"], EXPOSITION) == ["kvtier_get_seconds"]


def test_checker_reports_a_label_value_no_series_has():
    assert missing(['rate(kvtier_tier_device{tier="nvme",counter="raeds"}[5m])'],
                   EXPOSITION) == ['kvtier_tier_device{counter="raeds"}']


def test_every_panel_and_variable_query_is_read():
    """The walk finds the expressions: one per panel target, plus the variables' queries."""
    import json
    dashboard = json.loads(DASHBOARD.read_text())
    targets = sum(len(p.get("targets", [])) for p in dashboard["panels"])
    variables = sum(1 for v in dashboard["templating"]["list"] if v["type"] == "query")
    assert targets > 40
    assert len(dashboard_expressions(dashboard)) == targets + variables


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """/metrics of a release kvtierd after some traffic through both tiers."""
    daemon = Daemon(tmp_path_factory.mktemp("kvtierd"), host_bytes="32MiB", slab_bytes="8MiB",
                    nvme_bytes="128MiB")
    daemon.start()
    try:
        with RawClient(daemon.unix) as c:
            ns = register_ns(c, "deploy-metrics", BLOCK_BYTES)
            # 50 MiB of blocks through a 32 MiB host tier: the oldest are demoted to NVMe.
            put_blocks(c, ns, 1, range(200), BLOCK_BYTES)
            tiers = lookup_each(c, ns, 1, range(0, 240, 10))
            assert "nvme" in tiers and "host" in tiers and None in tiers, tiers
            get_each(c, ns, 1, range(0, 200, 25))
            # A shared-memory read of a host block (the newest put is in the host tier).
            _, fd = c.attach()
            os.close(fd)
            grant = c.call("KVT.ACQUIRE", ns, key(1, 199))[0]
            assert grant[0] == b"OK", grant
            assert c.call("KVT.RELEASE", grant[1]) == [b"OK"]
        text = http_get(daemon, "/metrics")
    finally:
        rc = daemon.stop()
    assert rc == 0, daemon.log()
    return text


def test_dashboard_and_alerts_use_only_exported_metrics(scraped):
    exprs = load_expressions(DASHBOARD, ALERTS)
    assert len(used_names(exprs)) > 20
    assert missing(exprs, scraped) == []


def test_the_check_fails_against_the_daemon_for_a_made_up_name(scraped):
    exprs = load_expressions(DASHBOARD, ALERTS) + ["sum(rate(kvtier_remote_errors_total[5m]))"]
    assert missing(exprs, scraped) == ["kvtier_remote_errors_total"]
