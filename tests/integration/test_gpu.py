"""kvtierd with a GPU tier, the host-memory fake (gpu.fake), so that it runs on any machine.

Puts land in host memory. A block read often enough (gpu.promote_after_reads, 2 by default) by
clients that attached the pool (KVT.GPUATTACH, then KVT.ACQUIRE) is copied up by the daemon's GPU
mover; reads by anyone else (GET, KVT.GET, the arena's shared-memory readers) never promote, since
they would get the block through a device-to-host copy. KVT.LOOKUP then reports tier 0 for it, GET
and KVT.GET still return its bytes, and /stats, /metrics, INFO and `kvtier stats` all show the GPU
tier. When the pool is full, its least recently used blocks go back to host memory. A daemon
without a GPU tier says why.
"""
import contextlib
import mmap
import os
import subprocess

from helpers import RawClient, http_get, parse_metrics, wait_for
from kvtierd_process import BIN_DIR, Daemon
from nvme_helpers import (MIB, get_each, key, lookup_each, payload, put_blocks, register_ns,
                          tier)

BLOCK_BYTES = 256 << 10
FAKE_GPU = "gpu:\n  fake: true\n"


@contextlib.contextmanager
def running(daemon):
    daemon.start()
    try:
        with RawClient(daemon.unix) as c:
            yield c
    finally:
        rc = daemon.stop()
    assert rc == 0, f"kvtierd did not stop cleanly (status {rc}):\n{daemon.log()}"


def gpu_daemon(tmp_path, gpu_bytes="64MiB"):
    return Daemon(tmp_path, host_bytes="64MiB", slab_bytes="8MiB", gpu_bytes=gpu_bytes,
                  extra_config=FAKE_GPU)


@contextlib.contextmanager
def pool_client(daemon):
    """A connection that attached the daemon's (fake) GPU pool, and the pool's descriptor."""
    with RawClient(daemon.unix) as attached:
        reply, fd = attached.attach("KVT.GPUATTACH")
        try:
            yield attached, reply, fd
        finally:
            os.close(fd)


def read_from_pool(daemon, ns, salt, numbers, times=2):
    """Leases and releases the blocks `times` over as a client of the GPU pool would."""
    keys = b"".join(key(salt, n) for n in numbers)
    with pool_client(daemon) as (attached, _, _):
        for _ in range(times):
            grants = attached.call("KVT.ACQUIRE", ns, keys)
            assert [g[0] for g in grants] == [b"OK"] * len(numbers), grants
            released = attached.call("KVT.RELEASE", *[g[1] for g in grants])
            assert released == [b"OK"] * len(numbers), released


def info_fields(c):
    text = c.call("INFO", "kvtier").decode()
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def test_a_block_read_often_moves_to_the_gpu_and_reads_back_right(tmp_path):
    d = gpu_daemon(tmp_path)
    with running(d) as c:
        ns = register_ns(c, "gpu/promote", BLOCK_BYTES)
        put_blocks(c, ns, 1, range(8), BLOCK_BYTES)
        assert lookup_each(c, ns, 1, range(8)) == ["host"] * 8
        stats = c.stats()
        assert tier(stats, "gpu")["blocks"] == 0, stats["tiers"]

        # Inline reads, however many, leave it in host memory.
        for _ in range(3):
            assert get_each(c, ns, 1, [0]) == [payload(1, 0, BLOCK_BYTES)]
        assert c.stats()["totals"]["gpu_candidates"] == 0
        read_from_pool(d, ns, 1, [0])
        assert wait_for(lambda: lookup_each(c, ns, 1, [0]) == ["gpu"], 5), \
            (lookup_each(c, ns, 1, range(8)), c.stats()["tiers"])
        # Read once each: not promoted. Every block reads back exactly, block 0 from the GPU.
        for n, got in zip(range(8), get_each(c, ns, 1, range(8))):
            assert got == payload(1, n, BLOCK_BYTES), f"block {n} read back wrong"
        assert lookup_each(c, ns, 1, range(8)) == ["gpu"] + ["host"] * 7

        # A generic value is only ever read inline: GET never moves it up.
        value = payload(2, 0, 3 * BLOCK_BYTES)
        assert c.call("SET", "gpu-key", value) == b"OK"
        for _ in range(3):
            assert c.call("GET", "gpu-key") == value

        stats = c.stats()
        gpu, host = tier(stats, "gpu"), tier(stats, "host")
        assert [t["tier"] for t in stats["tiers"]] == ["gpu", "host"]
        assert gpu["capacity_bytes"] == 64 * MIB
        assert gpu["used_bytes"] >= BLOCK_BYTES and gpu["blocks"] == 1, gpu
        assert host["promotions"] == 1 and gpu["copy_errors"] == 0, stats["tiers"]
        assert stats["process"]["gpu_tier"] == "", stats["process"]
        assert stats["totals"]["gpu_candidates"] == 1, stats["totals"]

        metrics = parse_metrics(http_get(d, "/metrics"))
        assert metrics[("kvtier_tier_blocks", 'tier="gpu"')] == 1
        assert metrics[("kvtier_tier_capacity_bytes", 'tier="gpu"')] == 64 * MIB
        assert metrics[("kvtier_tier_promotions_total", 'tier="host"')] == 1
        info = info_fields(c)
        assert info["tier_gpu_blocks"] == "1" and info["tier_host_promotions"] == "1", info
        cli = subprocess.run([str(BIN_DIR / "kvtier"), "stats", "--url", f"unix://{d.unix}"],
                             capture_output=True, text=True, timeout=15)
        assert cli.returncode == 0, cli.stderr
        # "gpu  256.0 KiB  64.0 MiB  0.4%  1 ...": TIER, USED, CAPACITY, USE, BLOCKS.
        rows = {line.split()[0]: line.split() for line in cli.stdout.splitlines() if line}
        assert "gpu" in rows, cli.stdout
        assert rows["gpu"][3:5] == ["64.0", "MiB"] and rows["gpu"][6] == "1", cli.stdout
        assert "no GPU tier" not in cli.stdout, cli.stdout


def test_clients_that_attach_the_pool_lease_promoted_blocks_in_it(tmp_path):
    d = gpu_daemon(tmp_path)
    with running(d) as c:
        ns = register_ns(c, "gpu/attach", BLOCK_BYTES)
        put_blocks(c, ns, 4, range(2), BLOCK_BYTES)
        read_from_pool(d, ns, 4, [0])
        assert wait_for(lambda: lookup_each(c, ns, 4, [0, 1]) == ["gpu", "host"], 5)
        with pool_client(d) as (attached, reply, fd):
            assert reply["kind"] == b"memfd" and reply["pool_bytes"] == 64 * MIB, reply
            with mmap.mmap(fd, 64 * MIB, mmap.MAP_SHARED, mmap.PROT_READ) as pool:
                grants = attached.call("KVT.ACQUIRE", ns, key(4, 0) + key(4, 1))
                # [OK, id, offset, length, tier]: block 0 in the GPU pool (0), 1 in host (1).
                assert [g[0] for g in grants] == [b"OK", b"OK"], grants
                assert grants[0][4] == 0 and grants[1][4] == 1, grants
                _, _, offset, length, _ = grants[0]
                assert pool[offset:offset + length] == payload(4, 0, BLOCK_BYTES)
                released = attached.call("KVT.RELEASE", *[g[1] for g in grants])
                assert released == [b"OK", b"OK"], released
        # A client that never attached the pool is not leased the GPU block: it reads it inline.
        with RawClient(d.unix) as plain:
            _, arena_fd = plain.attach()
            os.close(arena_fd)
            grants = plain.call("KVT.ACQUIRE", ns, key(4, 0))
            assert grants[0][0] == b"NOTFOUND", grants
        assert get_each(c, ns, 4, [0]) == [payload(4, 0, BLOCK_BYTES)]


def test_a_full_gpu_tier_demotes_its_least_recently_used_blocks_to_host(tmp_path):
    # 8 MiB of fake device memory: 32 blocks. 48 are read twice, so 16 come back down.
    d = gpu_daemon(tmp_path, gpu_bytes="8MiB")
    with running(d) as c:
        ns = register_ns(c, "gpu/pressure", BLOCK_BYTES)
        put_blocks(c, ns, 3, range(48), BLOCK_BYTES)
        read_from_pool(d, ns, 3, range(48))

        def settled():
            stats = c.stats()
            gpu = tier(stats, "gpu")
            done = (stats["totals"]["pending_promotions"] == 0 and gpu["blocks"] == 32 and
                    gpu["demotions"] == 16)
            return stats if done else None
        stats = wait_for(settled, 10)
        assert stats, c.stats()
        where = lookup_each(c, ns, 3, range(48))
        assert where.count("gpu") == 32 and where.count("host") == 16, where
        assert tier(stats, "host")["promotions"] == 48 and stats["totals"]["evicted_blocks"] == 0
        for n, got in zip(range(48), get_each(c, ns, 3, range(48))):
            assert got == payload(3, n, BLOCK_BYTES), f"block {n} read back wrong"


def test_without_a_gpu_tier_every_view_says_why(tmp_path):
    d = Daemon(tmp_path, gpu_bytes="0")
    with running(d) as c:
        stats = c.stats()
        assert [t["tier"] for t in stats["tiers"]] == ["host"]
        note = "no GPU tier: disabled in config (gpu.bytes is 0)"
        assert stats["process"]["gpu_tier"] == note, stats["process"]
        cli = subprocess.run([str(BIN_DIR / "kvtier"), "stats", "--url", f"unix://{d.unix}"],
                             capture_output=True, text=True, timeout=15)
        assert cli.returncode == 0 and note in cli.stdout, (cli.stdout, cli.stderr)


def test_a_fake_gpu_tier_needs_an_explicit_size(tmp_path):
    config = tmp_path / "kvtierd.yaml"
    config.write_text(FAKE_GPU)
    done = subprocess.run([str(BIN_DIR / "kvtierd"), "--config", str(config), "--nvme-bytes", "0"],
                          capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done
    assert "gpu.fake: needs an explicit gpu.bytes" in done.stderr, done.stderr
