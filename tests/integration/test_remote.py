"""Two kvtierd nodes sharing a remote tier on a real Redis Cluster (3 masters, 3 replicas, Debian's
redis-server on loopback ports): blocks pushed out of node 1 by pressure are published, and served
through node 2 byte for byte; a record corrupted in the cluster is a miss and a counter; with one
master stopped, then the whole cluster, both nodes keep serving their local tiers, and the remote
tier serves again once the cluster is back; a node started while its remote store is down serves
its local tiers and reaches the store once it answers; with NVMe, blocks pushed out of NVMe are
published and served through another node; `kvtier replay` on both nodes while a master
is killed finishes with no wrong and no lost block (docs/scale-out.md)."""
import json
import signal
import subprocess
import time

import pytest

from helpers import (RawClient, RespError, as_dict, http_get, pack_keys, parse_metrics,
                     register_args, wait_for)
from kvtierd_process import BIN_DIR, REPO, Daemon, free_port
from redis_server import (REDIS_CLI, REDIS_SERVER, RedisCluster, free_cluster_port,
                          redis_server, start_redis)

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


def payload(n):
    return bytes([(n * 37 + i) % 251 for i in range(256)]) * (BLOCK // 256)


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


def test_with_nvme_blocks_pushed_out_of_nvme_are_served_by_another_node(cluster, tmp_path):
    """Host and NVMe above the cluster: NVMe is the last local tier, and what leaves it (by the
    mover's watermarks, or for a demotion's room) is published first. 96 blocks (24 MiB) through
    8 MiB of host and 8 MiB of NVMe: every one is served, by that node or through another. Both
    nodes are the test's own: the module's nodes keep what the other tests expect of them."""
    model = "remote-nvme-test"
    writer = Daemon(tmp_path / "writer", host_bytes=HOST_BYTES, slab_bytes="1MiB",
                    nvme_bytes="8MiB", extra_config=EXTRA_CONFIG)
    reader = Daemon(tmp_path / "reader", host_bytes=HOST_BYTES, slab_bytes="1MiB",
                    extra_config=EXTRA_CONFIG)
    started = []
    try:
        for d in (writer, reader):
            d.workdir.mkdir()
            d.start(extra_args=["--remote", cluster.url])
            started.append(d)
        count = 96
        keys = pack_keys(range(1000, 1000 + count))
        with client(writer) as c:
            reply = c.call(*register_args(model, BLOCK))
            assert not isinstance(reply, RespError), reply
            ns = as_dict(reply)["ns"].decode().lower()
            for i in range(count):
                reply = c.call("KVT.PUT", ns, keys[16 * i:16 * (i + 1)], payload(1000 + i))
                assert reply == [b"OK"], (i, reply)
        stats = json.loads(http_get(writer, "/stats"))
        nvme = next(t for t in stats["tiers"] if t["tier"] == "nvme")
        assert nvme["evictions"] > 0, nvme  # blocks left NVMe: the case under test
        assert stats["totals"]["remote_publishes"] >= nvme["evictions"], stats["totals"]
        # The reader never saw this namespace: whatever it serves comes from the cluster.
        with client(reader) as c, client(writer) as local:
            reply = c.call(*register_args(model, BLOCK))
            assert as_dict(reply)["ns"].decode().lower() == ns
            for i in range(count):
                key = keys[16 * i:16 * (i + 1)]
                if c.call("KVT.GET", ns, key) == [payload(1000 + i)]:
                    continue
                # Not in the cluster: it must still be in a local tier of the node that wrote it
                # (a lookup, which moves nothing), or have left it since, published on the way.
                held = local.call("KVT.LOOKUP", ns, key)
                if held[0] == 1 and held[1] in (b"1", b"2"):
                    continue
                assert c.call("KVT.GET", ns, key) == [payload(1000 + i)], (i, held)
        assert totals(writer)["remote_publish_errors"] == 0, totals(writer)
    finally:
        for d in started:
            assert d.stop() == 0, d.log()


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


def test_a_stopped_master_then_the_whole_cluster_cost_hits_until_the_cluster_is_back(
        cluster, nodes, published):
    # The last test on the module's cluster: the stopped master may be failed over to its replica
    # after the SIGCONT, seconds later, while a test after this one would be using the cluster.
    ns = published
    node1, node2 = nodes
    recent = BLOCKS - 1  # still in node 1's host tier
    # Published by node 1, never read by node 2: which of them the slow master holds.
    unread = range(16, 32)
    slow = cluster.masters()[0]
    on_slow = {n for n in unread if cluster.holds(slow, remote_key(ns, n))}
    assert 0 < len(on_slow) < len(unread), on_slow
    cluster.signal(slow, signal.SIGSTOP)
    try:
        # A slow master: its blocks are misses once remote.timeout_ms (500) passed or its
        # breaker opened; the other masters' blocks are served, byte for byte.
        with client(node2) as c:
            for n in unread:
                started = time.monotonic()
                got = c.call("KVT.GET", ns, pack_keys([n]))
                assert time.monotonic() - started < 3, n
                if n in on_slow:
                    assert got in ([None], [payload(n)]), n  # a miss, or its promoted replica's
                else:
                    assert got == [payload(n)], n
        client_stats = json.loads(http_get(node2, "/stats"))["remote_client"]
        assert client_stats["errors_timeout"] + client_stats["errors_breaker"] > 0, client_stats

        # Then the whole cluster.
        cluster.signal_all(signal.SIGSTOP)
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
    assert cluster.wait_ok(timeout_s=30)

    # The cluster is back: the blocks the slow master held are served again (once the breaker
    # lets a call through), and node 1 publishes again.
    def served_again():
        with client(node2) as c:
            return all(c.call("KVT.GET", ns, pack_keys([n])) == [payload(n)] for n in on_slow)
    assert wait_for(served_again, timeout_s=30)
    # Node 1's breakers reopen to calls after their backoff (at most 5 s): until then the blocks
    # its puts push out are dropped unpublished, so it puts until one is published again.
    published_before = totals(node1)["remote_publishes"]
    fresh = iter(range(BLOCKS + 40, BLOCKS + 1000))

    def publishes_again():
        with client(node1) as c:
            n = next(fresh)
            assert c.call("KVT.PUT", ns, pack_keys([n]), payload(n)) == [b"OK"], n
        return totals(node1)["remote_publishes"] > published_before
    assert wait_for(publishes_again, timeout_s=30, interval_s=0.1)


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


TRACE = REPO / "tests" / "data" / "mooncake_conversation_trace.jsonl"


def start_replay(node, trace, salt):
    """`kvtier replay` of `trace` through `node`, in the background; its JSON summary on stdout.
    Each lookup holds what it found for a second, as the vLLM connector does until it has loaded
    it (hold_s): with a 4 MiB host tier the mover would otherwise evict a block between the lookup
    and the get, and while a master is down its publish fails, so the block is gone (a miss,
    counted lost). A hold no longer than that: held blocks cannot make room for puts, and 256 of
    them fill the tier."""
    return subprocess.Popen(
        [str(BIN_DIR / "kvtier"), "replay", str(trace), "--url", f"unix://{node.unix}",
         "--block-bytes", "16KiB", "--salt", salt, "--hold-ms", "1000", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_master_killed_during_replays_on_both_nodes_loses_no_block(tmp_path):
    """The trace's first 3,000 requests, the even ones replayed through node 1 and the odd ones
    through node 2 at the same time, with write-through so each finds the other's blocks; a master
    is killed with SIGKILL once the replays are under way and its replica takes over."""
    cluster = RedisCluster(tmp_path / "cluster")
    nodes = []
    try:
        lines = TRACE.read_text().splitlines()[:3000]
        halves = []
        for half in (0, 1):
            trace = tmp_path / f"half{half}.jsonl"
            trace.write_text("\n".join(lines[half::2]) + "\n")
            halves.append(trace)
        # Lookups at the replicas: a block a lookup found survives the failover.
        config = EXTRA_CONFIG.replace(
            "remote:\n", "remote:\n  write_through: true\n  lookups_on_replicas: true\n")
        for name in ("node1", "node2"):
            (tmp_path / name).mkdir()
            node = Daemon(tmp_path / name, host_bytes="4MiB", slab_bytes="1MiB",
                          extra_config=config)
            node.start(extra_args=["--remote", cluster.url])
            nodes.append(node)
        replays = [start_replay(node, trace, "failover-test") for node, trace in zip(nodes, halves)]
        assert wait_for(lambda: totals(nodes[0])["remote_publishes"] > 200, timeout_s=60), \
            json.dumps(totals(nodes[0]))
        victim = cluster.masters()[0]
        cluster.signal(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        assert all(replay.poll() is None for replay in replays), "the replays ended too soon"
        summaries = []
        for replay in replays:
            out, err = replay.communicate(timeout=300)
            assert replay.returncode == 0, err.decode()
            summaries.append(json.loads(out))
        for node, summary in zip(nodes, summaries):
            if summary["lost_blocks"]:  # what the node saw of the remote tier, to tell why
                stats = json.loads(http_get(node, "/stats"))
                print("lost after a lookup:", json.dumps(summary), json.dumps(
                    {"remote_client": stats["remote_client"],
                     "totals": {k: v for k, v in stats["totals"].items() if "remote" in k}}))
        for summary in summaries:
            assert summary["corrupt_blocks"] == 0, summary
            # A block a lookup found stays readable: from the victim's replica while the victim
            # is dead (the cluster serves reads while it is down, as deploy/redis/redis-cluster.conf
            # advises), then from the replica promoted, which has it since lookups ask the
            # replicas (remote.lookups_on_replicas).
            assert summary["lost_blocks"] == 0, summary
            assert summary["failed_puts"] == 0, summary
            # A lookup waits on the cluster for at most remote.lookup_timeout_ms (200), a fetch
            # for remote.timeout_ms (500): no request comes near 3 s.
            assert summary["latency_us"]["request"]["max"] < 3_000_000, summary["latency_us"]
        # Each node served blocks that the other computed.
        assert all(s["hit_ratio_by_tier"]["remote"] > 0 for s in summaries), summaries
        print(f"replays ended {time.monotonic() - killed_at:.1f} s after the kill:",
              [(s["lost_blocks"], s["block_hit_ratio"]) for s in summaries])
        # The victim's replica took over: three masters again, the cluster whole.
        assert wait_for(lambda: len(cluster.masters()) == 3, timeout_s=20)
        assert cluster.wait_ok(timeout_s=20, ports=[p for p in cluster.ports if p != victim])
        errors = json.loads(http_get(nodes[0], "/stats"))["remote_client"]
        assert errors["errors_unavailable"] + errors["errors_timeout"] + \
            errors["errors_breaker"] > 0, errors
    finally:
        for node in nodes:
            assert node.stop() == 0, node.log()
        cluster.close()


def make_certificates(directory):
    """A throwaway CA and a certificate for 127.0.0.1 signed by it, and a second CA that signed
    nothing; made with the openssl command (scripts/install-deps.sh installs it)."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", str(directory / f"{ca}.key"), "-out",
                str(directory / f"{ca}.crt"), "-days", "2", "-subj", f"/CN=kvtier test {ca}")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(directory / "server.key"), "-out", str(directory / "server.csr"),
            "-subj", "/CN=redis.test")
    (directory / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:redis.test\n")
    openssl("x509", "-req", "-in", str(directory / "server.csr"), "-CA", str(directory / "ca.crt"),
            "-CAkey", str(directory / "ca.key"), "-CAcreateserial", "-out",
            str(directory / "server.crt"), "-days", "2", "-extfile", str(directory / "server.ext"))


def test_over_tls_a_block_written_through_one_node_is_read_by_another(tmp_path):
    """rediss:// to a redis-server that speaks TLS on its tls-port: node 1 writes a block through,
    node 2 reads it; a node given another CA refuses to start, naming the handshake's reason."""
    make_certificates(tmp_path)
    plain, tls_port = free_port(), free_port()
    server_dir = tmp_path / "redis"
    server_dir.mkdir()
    with redis_server(server_dir, plain, "--tls-port", str(tls_port), "--tls-cert-file",
                      str(tmp_path / "server.crt"), "--tls-key-file",
                      str(tmp_path / "server.key"), "--tls-ca-cert-file", str(tmp_path / "ca.crt"),
                      "--tls-auth-clients", "no"):
        url = f"rediss://127.0.0.1:{tls_port}"
        nodes = []
        try:
            for name, write_through in (("node1", "true"), ("node2", "false")):
                (tmp_path / name).mkdir()
                config = EXTRA_CONFIG.replace(
                    "remote:\n", f"remote:\n  write_through: {write_through}\n"
                                 f"  tls_ca_file: {tmp_path / 'ca.crt'}\n")
                node = Daemon(tmp_path / name, host_bytes=HOST_BYTES, slab_bytes="1MiB",
                              extra_config=config)
                node.start(extra_args=["--remote", url])
                nodes.append(node)
            assert "TLS" in nodes[0].log()
            n = 7000
            with client(nodes[0]) as c:
                ns = register(c)
                assert c.call("KVT.PUT", ns, pack_keys([n]), payload(n)) == [b"OK"]
            assert wait_for(lambda: totals(nodes[0])["remote_publishes"] == 1, timeout_s=10), \
                json.dumps(totals(nodes[0]))
            with client(nodes[1]) as c:
                assert register(c) == ns
                assert c.call("KVT.LOOKUP", ns, pack_keys([n])) == [1, b"3"]
                assert c.call("KVT.GET", ns, pack_keys([n])) == [payload(n)]
            # The record went over TLS: the plain port holds it too (one server).
            assert REDIS_CLI and subprocess.run(
                [REDIS_CLI, "-p", str(plain), "EXISTS", remote_key(ns, n)],
                capture_output=True, text=True).stdout.strip() == "1"
        finally:
            for node in nodes:
                assert node.stop() == 0, node.log()

        (tmp_path / "untrusting").mkdir()
        untrusting = Daemon(tmp_path / "untrusting", host_bytes=HOST_BYTES, slab_bytes="1MiB",
                            extra_config=EXTRA_CONFIG.replace(
                                "remote:\n", f"remote:\n  tls_ca_file: {tmp_path / 'other-ca.crt'}\n"))
        untrusting.start(extra_args=["--remote", url], wait=False)
        assert untrusting.proc.wait(timeout=15) != 0
        assert "remote.url" in untrusting.log() and "certificate" in untrusting.log(), \
            untrusting.log()
