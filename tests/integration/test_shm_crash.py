"""The shared-memory path over a raw Unix socket, and clients that die in the middle of it.

A writer SIGKILLed after KVT.RESERVE and a partial write must leave no visible block and no
reservation behind; a reader SIGKILLed while holding leases must leave no lease behind. The daemon
learns of the death only through the closed socket, so this is what the per-connection cleanup is
for (the lease and reservation timeouts are 30 s, far beyond the polls here).
"""
import array
import mmap
import os
import pathlib
import signal
import socket
import subprocess
import sys

import pytest

from helpers import RawClient, RespError, pack_keys, register_args, as_dict, wait_for

CHILD = pathlib.Path(__file__).with_name("shm_child.py")
BLOCK_BYTES = 64 << 10
CLEANUP_TIMEOUT_S = 5


@pytest.fixture
def client(kvtierd):
    with RawClient(kvtierd.unix) as c:
        yield c


def register_ns(client, model):
    reply = client.call(*register_args(model, BLOCK_BYTES))
    assert not isinstance(reply, RespError), reply
    return as_dict(reply)["ns"].decode()


def totals(client):
    return client.stats()["totals"]


def start_child(daemon, ns, first, count, mode):
    child = subprocess.Popen([sys.executable, str(CHILD), daemon.unix, ns, str(first), str(count),
                              str(BLOCK_BYTES), mode], stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    if not line.startswith("READY"):
        child.kill()
        child.wait()
        pytest.fail(f"child did not get ready (mode {mode}): {line!r}")
    return child, [int(x) for x in line.split()[1:]]


def kill(child):
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
    child.stdout.close()


def test_reserve_write_commit_acquire(client):
    ns = register_ns(client, "shm/roundtrip")
    info, fd = client.attach()
    assert info["tier"] == b"host" and info["arena_bytes"] == 256 << 20
    with mmap.mmap(fd, info["arena_bytes"], mmap.MAP_SHARED,
                   mmap.PROT_READ | mmap.PROT_WRITE) as arena:
        os.close(fd)
        keys = pack_keys(range(3), salt=0x77)
        payloads = [os.urandom(BLOCK_BYTES) for _ in range(3)]
        grants = client.call("KVT.RESERVE", ns, keys, BLOCK_BYTES)
        assert [g[0] for g in grants] == [b"OK"] * 3
        for (_, _, offset), payload in zip(grants, payloads):
            arena[offset:offset + BLOCK_BYTES] = payload
        # Reserved but not committed: invisible.
        assert client.call("KVT.LOOKUP", ns, keys) == [0, b""]
        assert totals(client)["blocks_writing"] >= 3
        assert client.call("KVT.COMMIT", *[g[1] for g in grants]) == [b"OK"] * 3
        assert client.call("KVT.COMMIT", grants[0][1]) == [b"NOTFOUND"]
        assert client.call("KVT.LOOKUP", ns, keys) == [3, b"111"]
        assert client.call("KVT.GET", ns, keys) == payloads

        leases = client.call("KVT.ACQUIRE", ns, keys + pack_keys([99], salt=0x77))
        assert [l[0] for l in leases] == [b"OK"] * 3 + [b"NOTFOUND"]
        for (_, _, offset, length), payload in zip(leases, payloads):
            assert length == BLOCK_BYTES and arena[offset:offset + length] == payload
        assert totals(client)["leases_active"] == 3
        assert client.call("KVT.RELEASE", *[l[1] for l in leases[:3]]) == [b"OK"] * 3
        assert totals(client)["leases_active"] == 0
    assert client.call("KVT.DROP", ns) == 3


def test_writer_killed_mid_write_leaves_nothing(kvtierd, client):
    ns = register_ns(client, "shm/killed-writer")
    keys = pack_keys(range(100, 108))
    writing_before = totals(client)["blocks_writing"]
    child, ids = start_child(kvtierd, ns, 100, 8, "reserve")
    assert len(ids) == 8
    assert totals(client)["blocks_writing"] == writing_before + 8
    assert client.call("KVT.LOOKUP", ns, keys) == [0, b""]
    kill(child)

    left = wait_for(lambda: totals(client)["blocks_writing"] == 0, CLEANUP_TIMEOUT_S)
    assert left, f"reservations leaked: {totals(client)}"
    assert client.call("KVT.LOOKUP", ns, keys) == [0, b""]
    assert client.call("KVT.GET", ns, keys) == [None] * 8
    assert totals(client)["aborted_puts"] >= 8
    # Ids of a dead connection are nobody else's to commit.
    assert client.call("KVT.COMMIT", *ids) == [b"NOTFOUND"] * 8
    # The keys can be written again, in full.
    blocks = [bytes([i]) * BLOCK_BYTES for i in range(8)]
    assert client.call("KVT.PUT", ns, keys, *blocks) == [b"OK"] * 8
    assert client.call("KVT.GET", ns, keys) == blocks
    assert client.call("KVT.DROP", ns) == 8


def test_reader_killed_holding_leases_releases_them(kvtierd, client):
    ns = register_ns(client, "shm/killed-reader")
    keys = pack_keys(range(200, 206))
    blocks = [bytes([i + 1]) * BLOCK_BYTES for i in range(6)]
    assert client.call("KVT.PUT", ns, keys, *blocks) == [b"OK"] * 6
    leases_before = totals(client)["leases_active"]
    children = [start_child(kvtierd, ns, 200, 6, "acquire") for _ in range(2)]
    assert totals(client)["leases_active"] == leases_before + 12
    # Leased blocks are not removed.
    assert client.call("KVT.DEL", ns, keys) == 0
    for child, _ in children:
        kill(child)

    gone = wait_for(lambda: totals(client)["leases_active"] == 0, CLEANUP_TIMEOUT_S)
    assert gone, f"leases leaked: {totals(client)}"
    assert totals(client)["expired_leases"] == 0, "leases ended by timeout, not by the close"
    assert client.call("KVT.GET", ns, keys) == blocks
    assert client.call("KVT.DEL", ns, keys) == 6
    assert client.call("KVT.LOOKUP", ns, keys) == [0, b""]
    client.call("KVT.DROP", ns)


def test_drop_while_a_killed_reader_held_leases(kvtierd, client):
    ns = register_ns(client, "shm/drop-under-lease")
    keys = pack_keys(range(300, 304))
    assert client.call("KVT.PUT", ns, keys, *[b"z" * BLOCK_BYTES] * 4) == [b"OK"] * 4
    present_before = totals(client)["blocks_present"]
    child, _ = start_child(kvtierd, ns, 300, 4, "acquire")
    # Leased blocks go when their lease ends.
    assert client.call("KVT.DROP", ns) == 0
    kill(child)
    assert wait_for(lambda: totals(client)["leases_active"] == 0, CLEANUP_TIMEOUT_S)
    assert wait_for(lambda: totals(client)["blocks_present"] == present_before - 4,
                    CLEANUP_TIMEOUT_S), totals(client)
    assert client.call("KVT.LOOKUP", ns, keys) == [0, b""]


def test_shared_memory_needs_the_unix_socket(kvtierd):
    with RawClient((kvtierd.host, kvtierd.port)) as tcp:
        for command in (["KVT.ATTACH"], ["KVT.RESERVE", "0" * 32, pack_keys([1]), "64"],
                        ["KVT.ACQUIRE", "0" * 32, pack_keys([1])]):
            reply = tcp.call(*command)
            assert isinstance(reply, RespError)
            assert "needs the Unix socket" in str(reply)


def test_attach_descriptor_rides_on_its_own_reply(kvtierd):
    """Pipelined PING, KVT.ATTACH, PING, KVT.ATTACH: each descriptor arrives once, in the read
    that holds its ATTACH reply's first byte (the kernel may join earlier bytes to that read,
    never later ones)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(kvtierd.unix)
        s.sendall(b"PING\r\nKVT.ATTACH\r\nPING\r\n" + b"*1\r\n$10\r\nKVT.ATTACH\r\n")
        data, fds = b"", []  # fds: (the bytes its recvmsg covered, as a range of data; fd)
        while data.count(b"+PONG\r\n") < 2 or len(fds) < 2:
            chunk, ancdata, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(4 * 4))
            assert chunk, f"closed early; got {data!r}"
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(payload[:len(payload) - len(payload) % 4])
                    fds.extend((range(len(data), len(data) + len(chunk)), fd) for fd in got)
            data += chunk
        first_reply = b"*4\r\n$11\r\narena_bytes\r\n"
        assert data.startswith(b"+PONG\r\n" + first_reply)
        assert len(fds) == 2
        assert data.index(first_reply) in fds[0][0] and data.rindex(first_reply) in fds[1][0]
        # A read that carries a descriptor ends with the ATTACH reply, not past it.
        assert fds[0][0].stop <= data.index(b"+PONG", 8)
        stats = [os.fstat(fd) for _, fd in fds]
        assert stats[0].st_ino == stats[1].st_ino and stats[0].st_size == 256 << 20
        for _, fd in fds:
            os.close(fd)
