"""Two kvtierd nodes sharing a remote tier on a real Redis Cluster (3 masters, 3 replicas, Debian's
redis-server on loopback ports): blocks pushed out of node 1 by pressure are published, and served
through node 2 byte for byte; a record corrupted in the cluster is a miss and a counter; with the
cluster stopped, both nodes keep serving their local tiers; a node started while its remote store
is down serves its local tiers and reaches the store once it answers (docs/scale-out.md)."""
import json
import random
import shutil
import signal
import socket
import subprocess
import time

import pytest

from helpers import (RawClient, RespError, as_dict, http_get, pack_keys, parse_metrics,
                     register_args, wait_for)
from kvtierd_process import Daemon
from redis_server import REDIS_SERVER, start_redis

REDIS_CLI = shutil.which("redis-cli")
pytestmark = pytest.mark.skipif(not REDIS_SERVER or not REDIS_CLI,
                                reason="needs redis-server and redis-cli (scripts/install-deps.sh)")

KIB = 1 << 10
BLOCK = 256 * KIB
# 32 blocks of room: the 64 put through node 1 push at least 32 out of it.
HOST_BYTES = "8MiB"
BLOCKS = 64
MODEL = "remote-test"
EXTRA_CONFIG = """\
remote:
  lookup_timeout_ms: 200
  timeout_ms: 500
  connect_timeout_ms: 300
limits:
  mover_wait_ms: 5000
"""


def free_cluster_port():
    """A free port whose cluster bus port (port + 10000, Redis' rule) is free and valid too."""
    while True:
        port = random.randint(20000, 50000)
        try:
            for p in (port, port + 10000):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue


def payload(n):
    return bytes([(n * 37 + i) % 251 for i in range(256)]) * (BLOCK // 256)


class RedisCluster:
    """Six redis-server processes in cluster mode, joined by redis-cli --cluster create."""

    def __init__(self, workdir, masters=3, replicas=1):
        self.workdir = workdir
        self.ports = []
        self.procs = []
        for _ in range(masters * (1 + replicas)):
            port = free_cluster_port()
            node_dir = workdir / str(port)
            node_dir.mkdir()
            self.procs.append(start_redis(
                port, node_dir, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "2000"))
            self.ports.append(port)
        for port in self.ports:
            assert wait_for(lambda: self.cli(port, "PING") == "PONG", timeout_s=10), port
        subprocess.run([REDIS_CLI, "--cluster", "create",
                        *[f"127.0.0.1:{p}" for p in self.ports],
                        "--cluster-replicas", str(replicas), "--cluster-yes"],
                       check=True, capture_output=True, timeout=30)
        for port in self.ports:
            assert wait_for(lambda: "cluster_state:ok" in self.cli(port, "CLUSTER", "INFO"),
                            timeout_s=15), port

    def cli(self, port, *args):
        """One redis-cli command in cluster mode (-c follows MOVED); its output, stripped."""
        done = subprocess.run([REDIS_CLI, "-c", "-p", str(port), *args], capture_output=True,
                              timeout=10)
        return done.stdout.decode(errors="replace").strip()

    @property
    def url(self):
        return "redis://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:2])

    def signal_all(self, sig):
        for proc in self.procs:
            proc.send_signal(sig)

    def close(self):
        self.signal_all(signal.SIGCONT)
        for proc in self.procs:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = RedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    yield c
    c.close()


@pytest.fixture(scope="module")
def nodes(cluster, tmp_path_factory):
    daemons = []
    for name in ("node1", "node2"):
        d = Daemon(tmp_path_factory.mktemp(name), host_bytes=HOST_BYTES, slab_bytes="1MiB",
                   extra_config=EXTRA_CONFIG)
        d.start(extra_args=["--remote", cluster.url])
        daemons.append(d)
    yield daemons
    for d in daemons:
        rc = d.stop()
        assert rc == 0, d.log()


def client(daemon):
    return RawClient((daemon.host, daemon.port), timeout_s=30)


def register(c):
    reply = c.call(*register_args(MODEL, BLOCK))
    assert not isinstance(reply, RespError), reply
    return as_dict(reply)["ns"].decode().lower()


def totals(daemon):
    return json.loads(http_get(daemon, "/stats"))["totals"]


def remote_key(ns, n):
    return f"kvt1:{ns}:{0:016x}{n:016x}"


@pytest.fixture(scope="module")
def published(nodes):
    """64 blocks put through node 1: the oldest leave it for the cluster."""
    node1 = nodes[0]
    with client(node1) as c:
        ns = register(c)
        keys = pack_keys(range(BLOCKS))
        for n in range(BLOCKS):
            reply = c.call("KVT.PUT", ns, keys[16 * n:16 * (n + 1)], payload(n))
            assert reply == [b"OK"], (n, reply)
    assert wait_for(lambda: totals(node1)["remote_publishes"] >= BLOCKS // 2, timeout_s=10), \
        json.dumps(totals(node1))
    return ns


def test_blocks_pushed_out_of_node1_are_served_by_node2_byte_for_byte(cluster, nodes, published):
    ns = published
    node1, node2 = nodes
    t1 = totals(node1)
    assert t1["remote_publish_errors"] == 0, t1
    assert t1["remote_publish_bytes"] == t1["remote_publishes"] * BLOCK
    # The first blocks left node 1 first; they are in the cluster as records.
    assert cluster.cli(cluster.ports[0], "EXISTS", remote_key(ns, 0)) == "1"
    first = 8
    keys = pack_keys(range(first))
    with client(node2) as c:
        assert register(c) == ns  # the same model: the same namespace on every node
        assert c.call("KVT.LOOKUP", ns, keys) == [first, b"3" * first]
        assert c.call("KVT.GET", ns, keys) == [payload(n) for n in range(first)]
        # Now local to node 2, in its host tier.
        assert c.call("KVT.LOOKUP", ns, keys) == [first, b"1" * first]
    t2 = totals(node2)
    assert t2["remote_fetches"] == first, t2
    assert t2["remote_fetch_corrupt"] == 0


def test_a_record_corrupted_in_the_cluster_is_a_miss_and_a_counter(cluster, nodes, published):
    ns = published
    node2 = nodes[1]
    n = 12  # published by node 1, never read by node 2
    key = remote_key(ns, n)
    # One payload byte changed in place (the record header is 72 bytes).
    assert cluster.cli(cluster.ports[0], "SETRANGE", key, str(72 + 1000), "X") != ""
    before = totals(node2)["remote_fetch_corrupt"]
    with client(node2) as c:
        assert c.call("KVT.GET", ns, pack_keys([n])) == [None]
    assert totals(node2)["remote_fetch_corrupt"] == before + 1


def test_with_the_cluster_stopped_both_nodes_serve_their_local_tiers(cluster, nodes, published):
    ns = published
    node1, node2 = nodes
    recent = BLOCKS - 1  # still in node 1's host tier
    cluster.signal_all(signal.SIGSTOP)
    try:
        with client(node1) as c:
            started = time.monotonic()
            assert c.call("KVT.GET", ns, pack_keys([recent])) == [payload(recent)]
            # A lookup past the local tiers costs at most the remote's lookup timeout.
            reply = c.call("KVT.LOOKUP", ns, pack_keys([recent, 10_000]))
            assert reply == [1, b"1"], reply
            assert time.monotonic() - started < 3
            # Puts go on: the blocks they push out are dropped unpublished, and counted.
            for n in range(BLOCKS, BLOCKS + 40):
                reply = c.call("KVT.PUT", ns, pack_keys([n]), payload(n))
                assert reply == [b"OK"], (n, reply)
        t1 = totals(node1)
        assert t1["remote_publish_errors"] > 0, json.dumps(t1)
        # The client's own view of the episode, in every stats view.
        client_stats = json.loads(http_get(node1, "/stats"))["remote_client"]
        assert client_stats["errors_timeout"] + client_stats["errors_breaker"] > 0, client_stats
        metrics = parse_metrics(http_get(node1, "/metrics"))
        assert metrics[("kvtier_remote_client", 'counter="errors_timeout"')] == \
            client_stats["errors_timeout"]
        with client(node2) as c:
            assert c.call("KVT.GET", ns, pack_keys([0])) == [payload(0)]  # fetched before
    finally:
        cluster.signal_all(signal.SIGCONT)


def test_with_write_through_a_block_is_a_hit_on_another_node_at_once(cluster, nodes,
                                                                       tmp_path):
    node2 = nodes[1]
    node_dir = tmp_path / "writer"
    node_dir.mkdir()
    writer = Daemon(node_dir, host_bytes=HOST_BYTES, slab_bytes="1MiB",
                    extra_config=EXTRA_CONFIG.replace("remote:\n", "remote:\n  write_through: true\n"))
    writer.start(extra_args=["--remote", cluster.url])
    try:
        n = 5000  # one block, far from filling the writer's host tier
        with client(writer) as c:
            ns = register(c)
            assert c.call("KVT.PUT", ns, pack_keys([n]), payload(n)) == [b"OK"]
        assert wait_for(lambda: totals(writer)["remote_publishes"] == 1, timeout_s=10), \
            json.dumps(totals(writer))
        with client(writer) as c:
            assert c.call("KVT.LOOKUP", ns, pack_keys([n])) == [1, b"1"]  # still local too
        with client(node2) as c:
            assert register(c) == ns
            assert c.call("KVT.GET", ns, pack_keys([n])) == [payload(n)]
    finally:
        assert writer.stop() == 0, writer.log()


def test_a_node_started_while_its_remote_store_is_down_reaches_it_later(tmp_path):
    port = free_cluster_port()  # nobody listens there yet
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    d = Daemon(node_dir, host_bytes=HOST_BYTES, slab_bytes="1MiB", extra_config=EXTRA_CONFIG)
    d.start(extra_args=["--remote", f"redis://127.0.0.1:{port}"])
    redis = None
    try:
        assert "not answering yet" in d.log(), d.log()
        with client(d) as c:
            ns = register(c)
            assert c.call("KVT.PUT", ns, pack_keys([0]), payload(0)) == [b"OK"]
            assert c.call("KVT.GET", ns, pack_keys([0])) == [payload(0)]
            assert c.call("KVT.GET", ns, pack_keys([1])) == [None]  # a miss, not an error
        redis_dir = tmp_path / "redis"
        redis_dir.mkdir()
        redis = start_redis(port, redis_dir)
        assert wait_for(lambda: "remote: reached a single Redis server" in d.log(),
                        timeout_s=20), d.log()
        # From now on, blocks pushed out of the node go to the store.
        with client(d) as c:
            for n in range(1, BLOCKS):
                assert c.call("KVT.PUT", ns, pack_keys([n]), payload(n)) == [b"OK"], n
        assert wait_for(lambda: totals(d)["remote_publishes"] > 0, timeout_s=10), \
            json.dumps(totals(d))
        done = subprocess.run([REDIS_CLI, "-p", str(port), "EXISTS", remote_key(ns, 1)],
                              capture_output=True, timeout=10)
        assert done.stdout.strip() == b"1", done
    finally:
        assert d.stop() == 0, d.log()
        if redis is not None:
            redis.kill()
            redis.wait()


@pytest.fixture
def redis_with_password(tmp_path):
    port = free_cluster_port()
    proc = start_redis(port, tmp_path, "--requirepass", "right-pass-1",
                       "--user", "kv", "on", ">kv-pass-2", "~kvt1:*", "+@all")
    assert wait_for(lambda: subprocess.run(
        [REDIS_CLI, "-p", str(port), "PING"], capture_output=True).returncode == 0, timeout_s=10)
    yield port
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("url,password,starts", [
    ("redis://127.0.0.1:{port}", "right-pass-1", True),
    ("redis://kv@127.0.0.1:{port}", "kv-pass-2", True),
    ("redis://127.0.0.1:{port}", "wrong-pass-3", False),
    ("redis://kv@127.0.0.1:{port}", "right-pass-1", False),
])
def test_the_remote_password_comes_from_the_environment_and_is_never_logged(
        tmp_path, monkeypatch, redis_with_password, url, password, starts):
    monkeypatch.setenv("KVTIER_REMOTE_PASSWORD", password)
    d = Daemon(tmp_path, host_bytes=HOST_BYTES, slab_bytes="1MiB")
    if starts:
        d.start(extra_args=["--remote", url.format(port=redis_with_password)])
        assert d.stop() == 0
        assert "password set" in d.log()
    else:
        d.start(extra_args=["--remote", url.format(port=redis_with_password)], wait=False)
        assert d.proc.wait(timeout=15) != 0
        # A clear error at start: the key to fix and the server's own words.
        assert "remote.url" in d.log() and "WRONGPASS" in d.log(), d.log()
    assert password not in d.log()
