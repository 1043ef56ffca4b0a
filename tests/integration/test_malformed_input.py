"""Hostile bytes on raw sockets: each frame gets an error (or a silent close) on its own
connection, while other clients keep being served and the daemon stays up."""
import socket
import time
import urllib.error
import urllib.request

import pytest

from helpers import RawClient, http_get
from kvtierd_process import Daemon

# A TLS 1.2 ClientHello, as a client that mistook the port for a TLS one would start.
TLS_CLIENT_HELLO = bytes.fromhex(
    "16030100a5010000a10303" + "00" * 32 + "00" + "0020" + "c02bc02fc02cc030cca9cca8c013c014"
    "009c009d002f0035000a0005" + "0100" + "0058" + "00000018001600001376657279"
    "2e6578616d706c652e636f6d000b000403000102000a000a0008001d001700180019000d0012001004010403"
    "050105030601060302010203ff0100010000120000")

FRAMES = {
    "huge bulk length": (b"*1\r\n$99999999999\r\n", b"-ERR Protocol error: invalid bulk length"),
    "bulk above the limit": (b"*2\r\n$3\r\nGET\r\n$536870913\r\n",
                             b"-ERR Protocol error: invalid bulk length"),
    "negative bulk length": (b"*1\r\n$-5\r\n", b"-ERR Protocol error: invalid bulk length"),
    "huge array length": (b"*99999999999\r\n", b"-ERR Protocol error: invalid multibulk length"),
    "negative array length": (b"*-7\r\n", b"-ERR Protocol error: invalid multibulk length"),
    "not a bulk": (b"*1\r\n:5\r\n", b"-ERR Protocol error: expected '$', got ':'"),
    "no CRLF after payload": (b"*1\r\n$4\r\nPINGxx\r\n",
                              b"-ERR Protocol error: bulk payload not followed by CRLF"),
    "TLS ClientHello": (TLS_CLIENT_HELLO,
                        b"-ERR Protocol error: invalid byte '\\x16' in inline request"),
    "HTTP POST": (b"POST /api HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\n\r\nPING",
                  b""),
    "HTTP GET": (b"GET / HTTP/1.1\r\nHost: localhost:6380\r\n\r\n",
                 b"-ERR wrong number of arguments for 'get' command"),
    "long inline line": (b"PING " + b"a" * (70 << 10),
                         b"-ERR Protocol error: too big inline request"),
}


def read_until_closed(sock, timeout_s=5):
    """Everything the server sends before it closes the connection."""
    sock.settimeout(timeout_s)
    data = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            return data, True
        data += chunk
    return data, False


def assert_serves(daemon):
    with RawClient((daemon.host, daemon.port)) as c:
        assert c.call("PING") == b"PONG"
    with RawClient(daemon.unix) as c:
        assert c.call("PING") == b"PONG"
    assert daemon.alive()


@pytest.mark.parametrize("name", list(FRAMES))
def test_hostile_frame(kvtierd, name):
    frame, expected = FRAMES[name]
    # A bystander connected before the attack keeps working after it.
    with RawClient((kvtierd.host, kvtierd.port)) as bystander:
        assert bystander.call("SET", "bystander", name) == b"OK"
        with socket.create_connection((kvtierd.host, kvtierd.port), timeout=5) as s:
            try:
                s.sendall(frame)
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed while we were still sending: also a fine answer
            reply, closed = read_until_closed(s)
        assert closed, f"{name}: the connection was left open"
        assert reply.startswith(expected), f"{name}: {reply[:200]!r}"
        if not expected:
            assert reply == b"", f"{name}: an HTTP request got a reply: {reply[:200]!r}"
        assert bystander.call("GET", "bystander") == name.encode()
        assert bystander.call("DEL", "bystander") == 1
    assert_serves(kvtierd)


def test_declared_length_is_not_allocated(kvtierd):
    """Many clients that each declare a 500 MiB argument and then stall cost no memory."""
    def rss_kib():
        with open(f"/proc/{kvtierd.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    before = rss_kib()
    socks = []
    try:
        for _ in range(20):
            s = socket.create_connection((kvtierd.host, kvtierd.port), timeout=5)
            s.sendall(b"*2\r\n$3\r\nSET\r\n$524288000\r\nabc")
            socks.append(s)
        assert_serves(kvtierd)
        grown_mib = (rss_kib() - before) / 1024
        assert grown_mib < 64, f"kvtierd grew by {grown_mib:.0f} MiB for 20 stalled frames"
    finally:
        for s in socks:
            s.close()
    assert_serves(kvtierd)


def test_a_bulk_limit_above_a_gib_lets_a_value_that_large_in(tmp_path):
    """Regression: limits.max_bulk_bytes above 1 GiB had no effect, since a whole command was held
    to a fixed 1 GiB: a 1.5 GB SET was refused as "too big command" as soon as its length came.
    The length alone shows it; no value that large is sent."""
    d = Daemon(tmp_path, extra_config="limits:\n  max_bulk_bytes: 1500MB\n")
    d.start()
    try:
        with socket.create_connection((d.host, d.port), timeout=5) as s:
            s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1500000000\r\nabc")
            s.shutdown(socket.SHUT_WR)  # the client gives up: the server only sees the end
            reply, closed = read_until_closed(s)
        assert closed
        assert b"too big command" not in reply, reply
        assert_serves(d)
    finally:
        assert d.stop() == 0


def test_protocol_errors_are_counted(kvtierd):
    with RawClient((kvtierd.host, kvtierd.port)) as c:
        before = c.stats()["process"]["protocol_errors"]
        with socket.create_connection((kvtierd.host, kvtierd.port), timeout=5) as s:
            s.sendall(b"*1\r\n$-5\r\n")
            read_until_closed(s)
        assert c.stats()["process"]["protocol_errors"] == before + 1


def test_client_that_vanishes_mid_frame(kvtierd):
    for partial in (b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\nabc", b"*2\r\n$4\r\nPI", b"PIN"):
        with socket.create_connection((kvtierd.host, kvtierd.port), timeout=5) as s:
            s.sendall(partial)
    assert_serves(kvtierd)
    with RawClient((kvtierd.host, kvtierd.port)) as c:
        assert c.call("EXISTS", "k") == 0


def test_http_endpoint_survives_garbage(kvtierd):
    assert http_get(kvtierd, "/healthz")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(kvtierd.http_url + "/no/such/page", timeout=5)
    assert e.value.code == 404
    for junk in (b"*1\r\n$4\r\nPING\r\n", TLS_CLIENT_HELLO,
                 b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\n",
                 b"GET /stats HTTP/1.1\r\nContent-Length: -1\r\n\r\n"):
        with socket.create_connection((kvtierd.host, kvtierd.http_port), timeout=5) as s:
            try:
                s.sendall(junk)
            except (BrokenPipeError, ConnectionResetError):
                pass
            read_until_closed(s, timeout_s=2)
    assert '"tiers"' in http_get(kvtierd, "/stats")
    assert_serves(kvtierd)
