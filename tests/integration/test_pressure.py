"""A small daemon under pressure: a full arena evicts, pins and leases hold blocks against eviction,
lapsed leases and reservations are taken back while their connection stays open, and the client
limit holds."""
import os
import socket
import time

import pytest

from helpers import (RawClient, RespError, as_dict, http_get, pack_keys, parse_metrics,
                     register_args, wait_for)
from kvtierd_process import Daemon

MIB = 1 << 20
HOST_BYTES = 32 * MIB
LEASE_TIMEOUT_MS = 2500
MAX_CLIENTS = 24
# Small, so that long replies go out in pieces.
INFLIGHT_BYTES = 256 << 10

EXTRA_CONFIG = f"""\
store:
  lease_timeout_ms: {LEASE_TIMEOUT_MS}
  reservation_timeout_ms: {LEASE_TIMEOUT_MS}
limits:
  max_clients: {MAX_CLIENTS}
  max_inflight_bytes_per_client: {INFLIGHT_BYTES}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("small"), host_bytes="32MiB", slab_bytes="4MiB",
               extra_config=EXTRA_CONFIG)
    d.start()
    yield d
    rc = d.stop()
    assert rc == 0, d.log()
    assert not os.path.exists(d.unix)


@pytest.fixture
def c(small):
    with RawClient(small.unix) as client:
        yield client


def fill(c, prefix, count, size):
    """SETs count values of size bytes; every one must be accepted (evicting older ones)."""
    for i in range(count):
        reply = c.call("SET", f"{prefix}:{i}", bytes([i % 251]) * size)
        assert reply == b"OK", (prefix, i, reply)


def register_ns(c, model, block_bytes):
    reply = c.call(*register_args(model, block_bytes))
    assert not isinstance(reply, RespError), reply
    return as_dict(reply)["ns"].decode()


def test_set_beyond_capacity_evicts_oldest(small, c):
    fill(c, "fill", 64, MIB)
    assert c.call("DBSIZE") < 32
    # The newest values are there, whole; the oldest went first.
    for i in range(60, 64):
        assert c.call("GET", f"fill:{i}") == bytes([i % 251]) * MIB
    assert c.call("GET", "fill:0") is None
    stats = c.stats()
    host = stats["tiers"][0]
    assert host["tier"] == "host" and host["evictions"] > 0
    assert host["used_bytes"] <= host["capacity_bytes"] == HOST_BYTES
    metrics = parse_metrics(http_get(small, "/metrics"))
    assert metrics[("kvtier_tier_evictions_total", 'tier="host"')] == host["evictions"]
    assert metrics[("kvtier_evicted_blocks_total", "")] == stats["totals"]["evicted_blocks"]
    info = c.call("INFO", "stats").decode()
    assert f"evicted_keys:{stats['totals']['evicted_blocks']}" in info


def test_a_new_size_class_finds_room_in_a_full_arena(small, c):
    # The arena is full of 1 MiB values; 4 KiB ones and then 3 MiB ones need whole slabs.
    fill(c, "mid", 40, MIB)
    fill(c, "tiny", 600, 100)
    fill(c, "large", 12, 3 * MIB)
    assert c.call("GET", "large:11") == bytes([11]) * 3 * MIB
    fill(c, "tiny2", 50, 100)
    assert c.call("GET", "tiny2:49") == bytes([49]) * 100


def test_value_larger_than_the_tier_is_rejected(c):
    reply = c.call("SET", "huge", b"x" * (HOST_BYTES + MIB))
    assert isinstance(reply, RespError) and str(reply).startswith("REJECTED"), reply
    assert c.call("GET", "huge") is None
    assert c.call("PING") == b"PONG"


def test_pinned_blocks_survive_pressure_until_unpinned(c):
    block = 256 << 10
    ns = register_ns(c, "pressure/pinned", block)
    keys = pack_keys(range(4), salt=1)
    assert c.call("KVT.PUT", ns, keys, *[bytes([i]) * block for i in range(4)]) == [b"OK"] * 4
    assert c.call("KVT.PIN", ns, keys, 60_000) == 4
    fill(c, "pin-a", 48, MIB)
    assert c.call("KVT.LOOKUP", ns, keys) == [4, b"1111"]
    assert c.call("KVT.GET", ns, keys) == [bytes([i]) * block for i in range(4)]
    assert c.call("KVT.PIN", ns, keys, 0) == 4
    fill(c, "pin-b", 48, MIB)
    assert c.call("KVT.LOOKUP", ns, keys)[0] < 4
    c.call("KVT.DROP", ns)


def test_lapsed_lease_is_taken_back_and_reported_torn(small, c):
    block = 64 << 10
    ns = register_ns(c, "pressure/lease", block)
    keys = pack_keys(range(2), salt=2)
    assert c.call("KVT.PUT", ns, keys, b"a" * block, b"b" * block) == [b"OK"] * 2
    expired_before = c.stats()["totals"]["expired_leases"]
    leases = c.call("KVT.ACQUIRE", ns, keys)
    assert [lease[0] for lease in leases] == [b"OK", b"OK"]
    assert c.stats()["totals"]["leases_active"] == 2
    assert wait_for(lambda: c.stats()["totals"]["leases_active"] == 0, 5), c.stats()["totals"]
    assert c.stats()["totals"]["expired_leases"] == expired_before + 2
    # The copy made under those leases must be treated as torn: RELEASE says NOTFOUND.
    assert c.call("KVT.RELEASE", leases[0][1], leases[1][1]) == [b"NOTFOUND"] * 2
    assert c.call("KVT.DEL", ns, keys) == 2
    c.call("KVT.DROP", ns)


def test_lapsed_reservation_is_aborted(c):
    block = 64 << 10
    ns = register_ns(c, "pressure/reservation", block)
    keys = pack_keys(range(3), salt=3)
    grants = c.call("KVT.RESERVE", ns, keys, block)
    assert [g[0] for g in grants] == [b"OK"] * 3
    assert wait_for(lambda: c.stats()["totals"]["blocks_writing"] == 0, 5), c.stats()["totals"]
    assert c.stats()["totals"]["expired_reservations"] >= 3
    assert c.call("KVT.COMMIT", *[g[1] for g in grants]) == [b"NOTFOUND"] * 3
    assert c.call("KVT.LOOKUP", ns, keys) == [0, b""]
    assert c.call("KVT.PUT", ns, keys, *[b"c" * block] * 3) == [b"OK"] * 3
    c.call("KVT.DROP", ns)


def test_leased_blocks_are_not_evicted(small, c):
    block = 512 << 10
    ns = register_ns(c, "pressure/leased", block)
    keys = pack_keys(range(2), salt=4)
    assert c.call("KVT.PUT", ns, keys, b"x" * block, b"y" * block) == [b"OK"] * 2
    # Leases last LEASE_TIMEOUT_MS here: fill the arena (36 MiB into 32) while they are held.
    leases = c.call("KVT.ACQUIRE", ns, keys)
    assert [lease[0] for lease in leases] == [b"OK"] * 2
    started = time.monotonic()
    fill(c, "lease-fill", 36, MIB)
    elapsed_ms = (time.monotonic() - started) * 1000
    assert elapsed_ms < LEASE_TIMEOUT_MS, "too slow to test eviction under a lease"
    assert c.call("KVT.RELEASE", *[lease[1] for lease in leases]) == [b"OK"] * 2
    assert c.call("KVT.LOOKUP", ns, keys) == [2, b"11"]
    c.call("KVT.DROP", ns)


def test_long_replies_in_pieces(small, c):
    values = [bytes([i + 1]) * MIB for i in range(8)]
    for i, v in enumerate(values):
        assert c.call("SET", f"long:{i}", v) == b"OK"
    assert c.call("MGET", *[f"long:{i}" for i in range(8)], "long:none") == values + [None]
    # A pipeline whose replies far outgrow the in-flight limit.
    c.send(b"".join(b"*2\r\n$3\r\nGET\r\n$6\r\nlong:%d\r\n" % (i % 8) for i in range(40)))
    assert [c.read_reply() for _ in range(40)] == [values[i % 8] for i in range(40)]
    block = 128 << 10
    ns = register_ns(c, "pressure/long-get", block)
    keys = pack_keys(range(64), salt=5)
    blocks = [os.urandom(block) for _ in range(64)]
    assert c.call("KVT.PUT", ns, keys, *blocks) == [b"OK"] * 64
    assert c.call("KVT.GET", ns, keys) == blocks
    c.call("KVT.DROP", ns)
    assert c.call("DEL", *[f"long:{i}" for i in range(8)]) == 8


def test_client_limit(small):
    with RawClient(small.unix) as c:
        # Connections of earlier tests are let go asynchronously: wait until only this one is left.
        assert wait_for(lambda: c.stats()["process"]["connected_clients"] == 1, 5)
    socks, refused = [], 0
    try:
        for _ in range(MAX_CLIENTS + 4):
            s = socket.create_connection((small.host, small.port), timeout=5)
            s.sendall(b"PING\r\n")
            reply = s.recv(100)
            if reply == b"+PONG\r\n":
                socks.append(s)
            else:
                assert reply.startswith(b"-BUSY max number of clients reached"), reply
                refused += 1
                s.close()
        assert MAX_CLIENTS - 1 <= len(socks) <= MAX_CLIENTS
        assert refused >= 4
    finally:
        for s in socks:
            s.close()
    with RawClient(small.unix) as c:
        assert c.call("PING") == b"PONG"
