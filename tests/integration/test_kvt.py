"""The KV-cache commands through redis-py's execute_command, and the statistics they leave behind
as KVT.STATS, HTTP /stats, /metrics and INFO report them: the four views must read the same
numbers."""
import json
import os

import pytest
import redis

from helpers import (http_get, namespace_stats, pack_keys, parse_metrics, register,
                     register_args, store_part)


def words(replies):
    return [w.decode() if isinstance(w, bytes) else w for w in replies]


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(kvtierd, request):
    client = redis.Redis(host=kvtierd.host, port=kvtierd.port, protocol=request.param,
                         socket_timeout=10)
    yield client
    client.close()


def stats(r):
    return json.loads(r.execute_command("KVT.STATS"))


def test_register_lookup_put_get_del_drop(r):
    model = f"kvt/put-get-{r.get_connection_kwargs()['protocol']}"
    ns, block_bytes = register(r, model)
    assert len(ns) == 32 and block_bytes == 2 * 2 * 1 * 4 * 2 * 2
    assert register(r, model) == (ns, block_bytes), "registering again changed the id"
    keys = pack_keys(range(5), salt=0x5EED)
    blocks = [os.urandom(block_bytes) for _ in range(5)]

    assert r.execute_command("KVT.LOOKUP", ns, keys) == [0, b""]
    assert words(r.execute_command("KVT.PUT", ns, keys[:48], *blocks[:3])) == ["OK"] * 3
    assert words(r.execute_command("KVT.PUT", ns, keys[:16], blocks[0])) == ["EXISTS"]
    assert words(r.execute_command("KVT.PUT", ns, keys[48:64], b"short")) == ["INVALID"]
    assert r.execute_command("KVT.LOOKUP", ns, keys) == [3, b"111"]
    assert r.execute_command("KVT.GET", ns, keys) == blocks[:3] + [None, None]

    assert r.execute_command("KVT.PIN", ns, keys, 60_000) == 3
    assert r.execute_command("KVT.PIN", ns, keys, 0) == 3
    # Removing the second block leaves a one-block prefix: GET stops at the first miss.
    assert r.execute_command("KVT.DEL", ns, keys[16:32]) == 1
    assert r.execute_command("KVT.LOOKUP", ns, keys) == [1, b"1"]
    assert r.execute_command("KVT.GET", ns, keys[:48]) == [blocks[0], None, None]

    assert r.execute_command("KVT.DROP", ns) == 2
    assert r.execute_command("KVT.LOOKUP", ns, keys) == [0, b""]
    assert r.execute_command("KVT.GET", ns, keys[:16]) == [None]
    with pytest.raises(redis.ResponseError, match=f"NOTFOUND namespace {ns} is not registered"):
        r.execute_command("KVT.DROP", ns)
    with pytest.raises(redis.ResponseError, match="NOTFOUND"):
        r.execute_command("KVT.PUT", ns, keys[:16], blocks[0])


def test_kvt_argument_errors(r):
    ns, block_bytes = register(r, "kvt/errors")
    with pytest.raises(redis.ResponseError,
                       match="packed keys must be a multiple of 16 bytes, got 15"):
        r.execute_command("KVT.LOOKUP", ns, b"x" * 15)
    with pytest.raises(redis.ResponseError, match="invalid namespace id: expected 32 hex digits"):
        r.execute_command("KVT.LOOKUP", "xyz", pack_keys([1]))
    with pytest.raises(redis.ResponseError, match="wrong number of blocks: 2 keys, 1 blocks"):
        r.execute_command("KVT.PUT", ns, pack_keys([1, 2]), b"a" * block_bytes)
    with pytest.raises(redis.ResponseError, match="INVALID model: required"):
        r.execute_command("KVT.REGISTER", "dtype", "fp16", "block_tokens", "2", "layout", "x")
    args = register_args("kvt/errors")
    with pytest.raises(redis.ResponseError, match="INVALID block_bytes"):
        r.execute_command(*args, "block_bytes", str(block_bytes * 2))
    with pytest.raises(redis.ResponseError, match="needs the Unix socket"):
        r.execute_command("KVT.ATTACH")
    # An unknown namespace is a miss, not an error.
    assert r.execute_command("KVT.LOOKUP", "0" * 32, pack_keys([1])) == [0, b""]


def test_stats_views_agree(kvtierd, r):
    model = f"kvt/stats-{r.get_connection_kwargs()['protocol']}"
    ns, block_bytes = register(r, model)
    before = stats(r)
    host_before = next(t for t in before["tiers"] if t["tier"] == "host")
    keys = pack_keys(range(5), salt=0xABC)
    assert words(r.execute_command("KVT.PUT", ns, keys[:48],
                                   *[bytes([i]) * block_bytes for i in range(3)])) == ["OK"] * 3
    for _ in range(2):
        assert r.execute_command("KVT.LOOKUP", ns, keys) == [3, b"111"]
    assert r.execute_command("KVT.GET", ns, keys)[:3] == [bytes([i]) * block_bytes
                                                          for i in range(3)]

    via_resp = stats(r)
    via_http = json.loads(http_get(kvtierd, "/stats"))
    metrics = parse_metrics(http_get(kvtierd, "/metrics"))
    info = r.info("kvtier")
    assert store_part(via_resp) == store_part(via_http)
    # An id lets a client read, explain and drop the namespace's blocks: no view that any client
    # may read shows it (this one is a TCP client, never an admin).
    assert all("id" not in n for n in via_resp["namespaces"] + via_http["namespaces"])
    for view in (json.dumps(via_resp), json.dumps(via_http), http_get(kvtierd, "/metrics"),
                 http_get(kvtierd, "/stats/history"), str(r.info("all"))):
        assert ns.lower() not in view.lower()

    mine = namespace_stats(via_resp, model)
    assert mine["registered"] is True
    assert mine["lookups"] == 2
    assert mine["lookup_blocks"] == 10
    assert mine["hit_blocks"] == {"gpu": 0, "host": 6, "nvme": 0, "remote": 0}
    assert mine["hit_tokens"] == 6 * 2
    assert mine["miss_blocks"] == 4
    assert mine["block_hit_ratio"] == pytest.approx(0.6)
    assert mine["puts"] == 3 and mine["put_bytes"] == 3 * block_bytes
    assert mine["gets"] == 3 and mine["get_misses"] == 1
    host = next(t for t in via_resp["tiers"] if t["tier"] == "host")
    assert host["blocks"] == host_before["blocks"] + 3
    assert via_resp["totals"]["committed_puts"] >= 3
    assert via_resp["totals"]["leases_active"] == 0
    assert via_resp["totals"]["blocks_writing"] == 0

    label = mine["label"]
    assert label.startswith(model + " fp16 ")
    ns_label = f'namespace="{label}",ns_ref="{mine["ref"]}"'
    assert metrics[("kvtier_lookups_total", ns_label)] == 2
    assert metrics[("kvtier_lookup_blocks_total", ns_label)] == 10
    assert metrics[("kvtier_hit_tokens_total", ns_label)] == 12
    for tier, hits in mine["hit_blocks"].items():
        assert metrics[("kvtier_hit_blocks_total", f'{ns_label},tier="{tier}"')] == hits
    for t in via_resp["tiers"]:
        tier = f'tier="{t["tier"]}"'
        assert metrics[("kvtier_tier_blocks", tier)] == t["blocks"]
        assert metrics[("kvtier_tier_used_bytes", tier)] == t["used_bytes"]
        assert metrics[("kvtier_tier_capacity_bytes", tier)] == t["capacity_bytes"]
        assert metrics[("kvtier_tier_evictions_total", tier)] == t["evictions"]
        assert info[f"tier_{t['tier']}_blocks"] == t["blocks"]
        assert info[f"tier_{t['tier']}_used_bytes"] == t["used_bytes"]
    totals = via_resp["totals"]
    assert metrics[("kvtier_blocks", "")] == totals["blocks_present"]
    assert metrics[("kvtier_leases_active", "")] == totals["leases_active"]
    assert metrics[("kvtier_puts_total", "")] == totals["committed_puts"]
    assert info["blocks_present"] == totals["blocks_present"]
    assert info["committed_puts"] == totals["committed_puts"]
    info_ns = info[f"ns_{mine['ref']}"]
    assert info_ns["lookups"] == 2 and info_ns["lookup_blocks"] == 10
    assert info_ns["hit_blocks"] == 6 and float(info_ns["hit_ratio"]) == pytest.approx(0.6)

    assert r.execute_command("KVT.DROP", ns) == 3


def test_process_section_agrees(kvtierd, r):
    via_resp = stats(r)["process"]
    via_http = json.loads(http_get(kvtierd, "/stats"))["process"]
    assert via_resp["version"] == via_http["version"]
    assert via_resp["total_connections"] <= via_http["total_connections"]


def test_metrics_series_unique_across_tenants(kvtierd, r):
    # Two tenants of one model: same model, dtype and tp, different salt. Prometheus rejects a
    # scrape that repeats a series, so each namespace needs its own label set.
    for salt in ("tenant-a", "tenant-b"):
        r.execute_command(*register_args("kvt/tenants"), "salt", salt)
    text = http_get(kvtierd, "/metrics")
    series = [line.rsplit(" ", 1)[0] for line in text.splitlines()
              if line and not line.startswith("#")]
    duplicates = sorted({s for s in series if series.count(s) > 1})
    assert duplicates == []


def test_flushdb_empties_the_generic_key_space_only(r):
    """FLUSHDB and FLUSHALL are the Redis tools' commands: they remove the generic values, never
    the blocks an engine stored under its own namespace."""
    protocol = r.get_connection_kwargs()["protocol"]
    ns, block_bytes = register(r, f"kvt/flush-{protocol}")
    keys = pack_keys(range(2), salt=0xF100 + protocol)
    blocks = [os.urandom(block_bytes) for _ in range(2)]
    assert words(r.execute_command("KVT.PUT", ns, keys, *blocks)) == ["OK"] * 2
    r.set("flush:generic", b"v", ex=100)
    for flush in (r.flushdb, r.flushall):
        assert flush() is True
        assert r.get("flush:generic") is None
        assert r.execute_command("KVT.LOOKUP", ns, keys) == [2, b"11"]
        r.set("flush:generic", b"v")
    assert r.execute_command("KVT.GET", ns, keys) == blocks
