"""Several clients at once on the same keys: readers never see a torn value, writers of one block
agree on a single winner, and nothing is left leased or half-written afterwards."""
import threading
import time

import redis

from helpers import RawClient, pack_keys, register

DURATION_S = 1.5
VALUE_BYTES = 256 << 10


def run_threads(targets):
    errors = []

    def guard(fn):
        try:
            fn()
        except Exception as e:  # reported below, with the thread's failure
            errors.append(repr(e))

    threads = [threading.Thread(target=guard, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a client thread hung"
    assert errors == []


def test_concurrent_set_get_of_one_key_never_tears(kvtierd):
    deadline = time.monotonic() + DURATION_S
    seen = {"values": 0, "nulls": 0, "busy": 0}
    lock = threading.Lock()

    def writer(fill):
        r = redis.Redis(host=kvtierd.host, port=kvtierd.port, socket_timeout=10)
        value = bytes([fill]) * VALUE_BYTES
        while time.monotonic() < deadline:
            try:
                assert r.set("contended", value) is True
            except redis.ResponseError as e:
                assert str(e).startswith("BUSY"), e
                with lock:
                    seen["busy"] += 1
        r.close()

    def reader():
        r = redis.Redis(unix_socket_path=kvtierd.unix, socket_timeout=10)
        while time.monotonic() < deadline:
            v = r.get("contended")
            with lock:
                seen["nulls" if v is None else "values"] += 1
            if v is not None:
                assert len(v) == VALUE_BYTES and v == v[:1] * VALUE_BYTES, "torn value"
                assert v[0] in (1, 2, 3)
        r.close()

    run_threads([lambda f=f: writer(f) for f in (1, 2, 3)] + [reader, reader])
    assert seen["values"] > 0
    with RawClient(kvtierd.unix) as c:
        totals = c.stats()["totals"]
        assert totals["leases_active"] == 0 and totals["blocks_writing"] == 0
        assert c.call("DEL", "contended") == 1


def test_concurrent_puts_of_one_block_have_one_winner(kvtierd):
    r = redis.Redis(host=kvtierd.host, port=kvtierd.port)
    ns, block_bytes = register(r, "concurrency/puts", 32 << 10)
    keys = pack_keys(range(64), salt=9)
    results = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def putter(fill):
        c = redis.Redis(unix_socket_path=kvtierd.unix)
        start.wait()
        reply = c.execute_command("KVT.PUT", ns, keys, *[bytes([fill]) * block_bytes] * 64)
        with lock:
            results.append((fill, [w.decode() for w in reply]))
        c.close()

    run_threads([lambda f=f: putter(f) for f in (1, 2, 3, 4)])
    for i in range(64):
        outcomes = sorted(res[i] for _, res in results)
        assert outcomes.count("OK") == 1, (i, outcomes)
        assert set(outcomes) <= {"OK", "EXISTS", "BUSY"}, (i, outcomes)
    blocks = r.execute_command("KVT.GET", ns, keys)
    assert all(b is not None and b == b[:1] * block_bytes for b in blocks)
    # Each block holds the payload of the writer whose put said OK.
    for i, b in enumerate(blocks):
        winner = next(fill for fill, res in results if res[i] == "OK")
        assert b[0] == winner, (i, b[0], winner)
    assert r.execute_command("KVT.DROP", ns) == 64
    r.close()
