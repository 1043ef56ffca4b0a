"""Helpers shared by the integration tests and the child scripts they run.

RawClient speaks RESP2 over a plain socket, with no client library in between: the crash tests
need to hold a connection, receive the arena descriptor with recvmsg and then die mid-operation,
and the malformed-input tests need to send bytes no library would.
"""
import array
import json
import re
import socket
import struct
import time
import urllib.request

PASSWORD = "s3cret-pass"


def pack_keys(numbers, salt=0):
    """Packed block keys: 16 bytes each, big-endian, high half first (docs/protocol.md)."""
    return b"".join(struct.pack(">QQ", salt, n) for n in numbers)


def register_args(model, block_bytes=None):
    args = ["KVT.REGISTER", "model", model, "dtype", "fp16", "layers", "2", "kv_heads", "1",
            "head_dim", "4", "block_tokens", "2", "layout", "nhd"]
    if block_bytes is not None:
        args += ["block_bytes", str(block_bytes)]
    return args


def as_dict(reply):
    """A RESP3 map or a RESP2 flat array of pairs as a dict with str keys."""
    if isinstance(reply, dict):
        items = reply.items()
    else:
        items = zip(reply[0::2], reply[1::2])
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in items}


def register(r, model, block_bytes=None):
    """Registers a namespace through redis-py; returns (ns hex as str, block_bytes)."""
    reply = as_dict(r.execute_command(*register_args(model, block_bytes)))
    ns = reply["ns"]
    return (ns.decode() if isinstance(ns, bytes) else ns), int(reply["block_bytes"])


def http_get(daemon, path):
    with urllib.request.urlopen(daemon.http_url + path, timeout=5) as resp:
        assert resp.status == 200
        return resp.read().decode()


def parse_metrics(text):
    """Prometheus text as {(name, labels): value}, labels the text between the braces."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
        assert m, f"malformed metrics line: {line!r}"
        samples[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return samples


def store_part(stats):
    """The store's numbers in a stats document: what every view must agree on."""
    return {k: stats[k] for k in ("tiers", "namespaces", "totals")}


def namespace_stats(stats, model):
    """The entry of the namespace registered for `model` (its label starts with it) in a stats
    document, where namespaces are named by label and ref (ids are shown to admins only)."""
    found = [e for e in stats["namespaces"] if e["label"].startswith(model + " ")]
    assert len(found) <= 1, found
    return found[0] if found else None


def wait_for(predicate, timeout_s=5.0, interval_s=0.05):
    """Polls until predicate() is truthy; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


class RespError(Exception):
    pass


def encode_command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RawClient:
    """A blocking RESP2 client on one socket. Error replies come back as RespError values."""

    def __init__(self, address, timeout_s=10):
        family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self.sock.connect(address)
        self.buf = b""
        self.fds = []

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def call(self, *args):
        self.send(encode_command(*args))
        return self.read_reply()

    def attach(self, command="KVT.ATTACH"):
        """KVT.ATTACH (or KVT.GPUATTACH of a daemon with the fake GPU pool): the reply as a dict
        and the descriptor that came with it (SCM_RIGHTS)."""
        self.send(encode_command(command))
        fds = array.array("i")
        while not self.fds:
            data, ancdata, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(fds.itemsize))
            if not data:
                raise ConnectionError(f"closed before the {command} reply")
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
                    self.fds.extend(fds)
            self.buf += data
            if not self.fds:
                raise ConnectionError(f"{command} reply came without a descriptor")
        return as_dict(self.read_reply()), self.fds.pop(0)

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed by the server")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read_reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            return RespError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read_reply() for _ in range(n)]
        raise ValueError(f"unexpected reply line {line!r}")

    def stats(self):
        return json.loads(self.call("KVT.STATS"))
