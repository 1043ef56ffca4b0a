"""FaultProxy: a TCP proxy between kvtier clients and kvtierd that spoils kvtierd's answers to
KVT.GET on demand, to show what a client makes of bad input (test_vllm_engine.py), or slows them
down, to stand for a slow tier (test_vllm_connector_*.py).

The client speaks RESP2 over TCP (the inline data path: payloads travel in the replies). Each
connection has two threads: one forwards commands and remembers their names in order, the other
forwards replies, matching each to its command (replies come in command order, pipelined or not).
Faults, set with `fault` at any time, apply to KVT.GET only (the "slow" fault: to the commands
named in `slowed`, KVT.GET unless a test says otherwise):
  * "error":     the reply is an error, as from a daemon that fails the command;
  * "truncate":  the first block in the reply loses its last byte (a short read somewhere);
  * "namespace": the command goes out with another namespace id, as if the namespace had been
                 dropped or were someone else's: kvtierd answers misses for blocks the lookup found;
  * "slow":      the reply is held `delay_s` seconds first, as from a tier that reads slowly;
  * None:        replies pass unchanged.
Replies to other commands are forwarded byte for byte, without being decoded.
"""
import socket
import threading
import time
from collections import deque

OTHER_NAMESPACE = b"0" * 31 + b"1"


def _line_end(buf, pos):
    end = buf.find(b"\r\n", pos)
    return None if end < 0 else end


def skip(buf, pos=0):
    """The end of the RESP2 value starting at pos, or None while it is incomplete."""
    end = _line_end(buf, pos)
    if end is None:
        return None
    kind, head = buf[pos:pos + 1], buf[pos + 1:end]
    if kind in (b"+", b"-", b":"):
        return end + 2
    n = int(head)
    if kind == b"$":
        stop = end + 2 + n + 2 if n >= 0 else end + 2
        return stop if len(buf) >= stop else None
    if kind == b"*":
        pos = end + 2
        for _ in range(max(n, 0)):
            pos = skip(buf, pos)
            if pos is None:
                return None
        return pos
    raise ValueError(f"not RESP2: {bytes(buf[pos:pos + 20])!r}")


def parse(buf, pos=0):
    """(value, end) of the complete RESP2 value at pos: bytes, int, None, list, or ("-", text)."""
    end = _line_end(buf, pos)
    kind, head = buf[pos:pos + 1], bytes(buf[pos + 1:end])
    if kind == b"+":
        return head, end + 2
    if kind == b"-":
        return ("-", head), end + 2
    if kind == b":":
        return int(head), end + 2
    n = int(head)
    if kind == b"$":
        return (None, end + 2) if n < 0 else (bytes(buf[end + 2:end + 2 + n]), end + 4 + n)
    items, pos = [], end + 2
    for _ in range(n):
        item, pos = parse(buf, pos)
        items.append(item)
    return (None if n < 0 else items), pos


def encode(value):
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, tuple):
        return b"-" + value[1] + b"\r\n"
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    return b"*%d\r\n" % len(value) + b"".join(encode(v) for v in value)


class FaultProxy:
    def __init__(self, upstream_port, upstream_host="127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.fault = None
        self.delay_s = 0.5  # the "slow" fault's
        self.slowed = {b"KVT.GET"}  # the commands whose replies it holds
        self.spoiled = 0  # KVT.GET replies or commands changed so far
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._threads = [threading.Thread(target=self._accept, name="fault-proxy", daemon=True)]
        self._threads[0].start()

    @property
    def url(self):
        return f"tcp://127.0.0.1:{self.port}"

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.upstream)
            names = deque()
            for target in (self._commands, self._replies):
                t = threading.Thread(target=target, args=(client, upstream, names), daemon=True)
                t.start()

    def _pump(self, src, dst, handle):
        buf = bytearray()
        try:
            while True:
                data = src.recv(1 << 20)
                if not data:
                    break
                buf += data
                pos = 0
                while (end := skip(buf, pos)) is not None:
                    dst.sendall(handle(buf, pos, end))
                    pos = end
                del buf[:pos]
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _commands(self, client, upstream, names):
        def handle(buf, pos, end):
            args, _ = parse(buf, pos)
            name = args[0].upper() if isinstance(args, list) and args else b""
            names.append(name)
            if name == b"KVT.GET" and self.fault == "namespace":
                self.spoiled += 1
                return encode([args[0], OTHER_NAMESPACE] + args[2:])
            return bytes(buf[pos:end])
        self._pump(client, upstream, handle)

    def _replies(self, client, upstream, names):
        def handle(buf, pos, end):
            name = names.popleft()
            if name in self.slowed and self.fault == "slow":
                self.spoiled += 1
                time.sleep(self.delay_s)
                return bytes(buf[pos:end])
            if name != b"KVT.GET" or self.fault not in ("error", "truncate"):
                return bytes(buf[pos:end])
            reply, _ = parse(buf, pos)
            self.spoiled += 1
            if self.fault == "error" or not isinstance(reply, list):
                return b"-ERR injected fault\r\n"
            blocks = list(reply)
            if blocks and blocks[0] is not None:
                blocks[0] = blocks[0][:-1]
            return encode(blocks)
        self._pump(upstream, client, handle)

    def close(self):
        self._listener.close()
