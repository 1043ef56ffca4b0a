"""Debian's redis-server, started by the tests and benchmarks that compare kvtierd with it or use
it as a remote store: one process on a loopback port, persistence off, logging to its directory.

Without redis-server the tests that need it skip, except under CI (the CI environment variable
set, as scripts/test.sh sets it), where its absence fails: scripts/install-deps.sh installs it.
"""
import contextlib
import os
import shutil
import socket
import subprocess
import time

import pytest

REDIS_SERVER = shutil.which("redis-server")
NO_REDIS = "needs Debian's redis-server, which scripts/install-deps.sh installs"


def require_redis_server():
    """Skips the calling test without redis-server, or fails it under CI."""
    if REDIS_SERVER is None:
        if os.environ.get("CI"):
            pytest.fail(NO_REDIS + " (CI runs this test: it may not skip)", pytrace=False)
        pytest.skip(NO_REDIS + " (under CI its absence fails)")


def start_redis(port, node_dir, *extra_args):
    """One redis-server on 127.0.0.1:port, persistence off, logging to node_dir/redis.log."""
    return subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node_dir),
         "--save", "", "--appendonly", "no", "--logfile", str(node_dir / "redis.log"),
         *extra_args],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def answers_ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server(workdir, port, *extra_args, timeout_s=10.0):
    """Starts redis-server on `port`, waits until it answers PING, yields its (host, port) and
    kills it at the end."""
    proc = start_redis(port, workdir, *extra_args)
    try:
        deadline = time.monotonic() + timeout_s
        while not answers_ping(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = workdir / "redis.log"
                raise RuntimeError("redis-server did not start:\n" +
                                   (log.read_text() if log.exists() else ""))
            time.sleep(0.02)
        yield "127.0.0.1", port
    finally:
        proc.kill()
        proc.wait()
