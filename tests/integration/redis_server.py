"""Debian's redis-server, started by the tests and benchmarks that compare kvtierd with it or use
it as a remote store: one process on a loopback port, persistence off, logging to its directory;
or a Redis Cluster of such processes (RedisCluster), joined by redis-cli.

Without redis-server the tests that need it skip, except under CI (the CI environment variable
set, as scripts/test.sh sets it), where its absence fails: scripts/install-deps.sh installs it.
"""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from free_ports import free_cluster_port  # noqa: F401  (re-exported for the tests)

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
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


def _wait(predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


class RedisCluster:
    """masters x (1 + replicas) redis-server processes in cluster mode on loopback, joined by
    redis-cli --cluster create, configured as deploy/redis/redis-cluster.conf advises; a node that
    misses 2 s of heartbeats counts as failed (its replica is promoted). `extra_args` go to every redis-server (maxmemory, say)."""

    def __init__(self, workdir, masters=3, replicas=1, extra_args=()):
        self.workdir = workdir
        self.ports = []
        self.procs = {}
        for _ in range(masters * (1 + replicas)):
            port = free_cluster_port(taken=self.ports)
            node_dir = workdir / str(port)
            node_dir.mkdir(parents=True)
            self.procs[port] = start_redis(
                port, node_dir, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "2000",
                # A replica takes over however long ago it last heard from its master (the tests
                # kill masters at any moment), and a new replica is sent its data at once.
                "--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0",
                # As deploy/redis/redis-cluster.conf advises: the slots of a dead master do not
                # stop the others, and its replica serves reads until it has taken over.
                "--cluster-require-full-coverage", "no", "--cluster-allow-reads-when-down", "yes",
                *extra_args)
            self.ports.append(port)
        for port in self.ports:
            if not _wait(lambda: self.cli(port, "PING") == "PONG", timeout_s=10):
                log = self.workdir / str(port) / "redis.log"
                raise RuntimeError(f"redis-server on port {port} did not start:\n" +
                                   (log.read_text()[-2000:] if log.exists() else ""))
        subprocess.run([REDIS_CLI, "--cluster", "create",
                        *[f"127.0.0.1:{p}" for p in self.ports],
                        "--cluster-replicas", str(replicas), "--cluster-yes"],
                       check=True, capture_output=True, timeout=30)
        if not self.wait_ok(timeout_s=15):
            raise RuntimeError("the cluster did not reach cluster_state:ok")
        # A replica that never synchronised with its master cannot replace it.
        if replicas and not _wait(lambda: self._replicas_online() == masters * replicas, 20):
            raise RuntimeError("the replicas did not synchronise with their masters")

    def _replicas_online(self):
        """Replicas that masters report synchronised (INFO replication: slaveN ... state=online)."""
        return sum(self.cli(p, "INFO", "replication").count("state=online") for p in self.ports)

    def cli(self, port, *args):
        """One redis-cli command in cluster mode (-c follows MOVED); its output, stripped."""
        try:
            done = subprocess.run([REDIS_CLI, "-c", "-p", str(port), *args],
                                  capture_output=True, timeout=10)
        except subprocess.TimeoutExpired:
            return ""  # a stopped node
        return done.stdout.decode(errors="replace").strip()

    def holds(self, port, key):
        """Whether the node on `port` holds `key` itself (no redirection followed)."""
        done = subprocess.run([REDIS_CLI, "-p", str(port), "EXISTS", key], capture_output=True,
                              timeout=10)
        return done.stdout.strip() == b"1"

    def wait_ok(self, timeout_s, ports=None):
        """True once every node of `ports` (default: all) says cluster_state:ok."""
        return all(_wait(lambda: "cluster_state:ok" in self.cli(p, "CLUSTER", "INFO"), timeout_s)
                   for p in (ports or self.ports))

    def masters(self):
        """Ports of the nodes that are masters now, by their own INFO replication."""
        return [p for p in self.ports
                if self.procs[p].poll() is None and "role:master" in self.cli(p, "INFO",
                                                                             "replication")]

    @property
    def url(self):
        return "redis://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:2])

    def signal(self, port, sig):
        self.procs[port].send_signal(sig)

    def signal_all(self, sig):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(sig)

    def close(self):
        self.signal_all(signal.SIGCONT)
        for proc in self.procs.values():
            proc.kill()
            proc.wait()
