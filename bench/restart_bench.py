"""A clean stop and restart of a live kvtierd: values written (more than the host tier holds, so
most live on NVMe and the newest in memory), SIGTERM, a restart on the same data directory, and
every value read back and compared.

Prints "NAME VALUE UNIT" lines (bench/README.md):
  clean_restart_served_fraction  values served after the restart / values written (target >= 0.99)
  clean_restart_wrong_values     values served with other bytes than were written (target 0)
  clean_stop_seconds             SIGTERM to exit: the flush of the host tier to NVMe, informative
  clean_restart_ready_seconds    start to serving every recovered block, informative

Standard library only: run it with any python3, after building build/bin/kvtierd. Starts and stops
its own daemon in a temporary directory; --quick writes fewer values.
"""
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN_DIR = pathlib.Path(os.environ.get("KVTIER_BIN_DIR", "build/bin"))
VALUE_BYTES = 128 << 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Resp:
    """The few RESP2 exchanges this bench needs: SET and GET of bulk strings."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(30)
        self.sock.connect(path)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _more(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("kvtierd closed the connection")
        self.buf += chunk

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += [b"$%d\r\n" % len(a), a, b"\r\n"]
        self.sock.sendall(b"".join(out))
        line = self._line()
        if line.startswith(b"$"):
            n = int(line[1:])
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._more()
            value, self.buf = self.buf[:n], self.buf[n + 2:]
            return value
        if line.startswith(b"-"):
            raise RuntimeError(line.decode())
        return line[1:]

    def close(self):
        self.sock.close()


def value(n):
    seed = n.to_bytes(8, "little")
    return (seed * (VALUE_BYTES // 8))[:VALUE_BYTES]


def start(work, sock, http_port, log):
    cmd = [str(BIN_DIR / "kvtierd"), "--unix", sock, "--port", "0", "--http-port", str(http_port),
           "--host-bytes", "64MiB", "--nvme-bytes", "1GiB",
           "--gpu-bytes", "0", "--data-dir", str(work / "data"), "--log-level", "info"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    started = time.monotonic()
    while time.monotonic() - started < 60:
        if proc.poll() is not None:
            raise RuntimeError(f"kvtierd exited with {proc.returncode}; see {log.name}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/stats", timeout=2) as r:
                if json.load(r)["totals"]["pending_adoptions"] == 0:
                    return proc, time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError("kvtierd did not become ready")


def main():
    quick = "--quick" in sys.argv[1:]
    count = 1200 if quick else 4000  # 150 MiB or 500 MiB through a 64 MiB host tier
    with tempfile.TemporaryDirectory(prefix="kvtier-restart-bench.") as tmp:
        work = pathlib.Path(tmp)
        sock = str(work / "kvtierd.sock")
        http_port = free_port()
        with open(work / "kvtierd.log", "ab") as log:
            proc, _ = start(work, sock, http_port, log)
            try:
                c = Resp(sock)
                for n in range(count):
                    c.call("SET", f"restart:{n}", value(n))
                c.close()
            finally:
                stopped = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                rc = proc.wait(timeout=300)
                stop_s = time.monotonic() - stopped
            if rc != 0:
                raise RuntimeError(f"kvtierd exited with {rc} at SIGTERM")
            proc, ready_s = start(work, sock, http_port, log)
            served = wrong = 0
            try:
                c = Resp(sock)
                for n in range(count):
                    got = c.call("GET", f"restart:{n}")
                    if got is not None:
                        served += 1
                        wrong += got != value(n)
                c.close()
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=300)
    print(f"clean_restart_served_fraction {served / count:.4f} ratio")
    print(f"clean_restart_wrong_values {wrong} count")
    print(f"clean_stop_seconds {stop_s:.3g} s")
    print(f"clean_restart_ready_seconds {ready_s:.3g} s")


if __name__ == "__main__":
    main()
