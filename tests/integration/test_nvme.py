"""kvtierd with an NVMe tier: blocks spill from a small host tier to NVMe and are served from there,
the cold cache survives a graceful restart, damaged bytes on disk are never served, the "reused"
admission policy keeps never-read blocks off the device, write-through says which puts are in
memory only, bad NVMe settings are refused, and a daemon without an NVMe tier says so.

The NVMe tier lives in a file under the test's directory (<data_dir>/nvme/), so the tests run on
any file system; docs/nvme-format.md describes the bytes the corruption test damages.
"""
import contextlib
import mmap
import os
import random
import shutil
import signal
import socket
import struct
import subprocess

import pytest

from helpers import RawClient, RespError, http_get, parse_metrics, wait_for
from kvtierd_process import BIN_DIR, Daemon, free_port
from nvme_helpers import (MIB, get_each, key, lookup_each, nvme_counters, payload,
                          pipelined, put_blocks, register_ns, tier, tier_sum)

BLOCK_BYTES = 256 << 10
HOST_BYTES = "32MiB"
NVME_BYTES = "256MiB"
# 75 MiB of blocks: more than twice the host tier, well within the NVMe tier.
BLOCKS = 300
RECORD_MAGIC = b"SVTBLOCK"  # docs/nvme-format.md: record header magic, little-endian u64
SECTOR = 4096


@pytest.fixture(autouse=True)
def _drop_nvme_data_files(tmp_path):
    """Removes the preallocated data files after each test (pytest keeps the directories of the
    last runs, and these hold hundreds of MiB each); logs and catalogs stay."""
    yield
    for path in tmp_path.rglob("kvtier-nvme.data"):
        path.unlink()


BACKENDS = pytest.mark.parametrize("backend", ["auto", "threads"])


def nvme_daemon(tmp_path, nvme_bytes=NVME_BYTES, extra_config="", backend=None):
    if backend is not None:
        extra_config = f"nvme:\n  io_backend: {backend}\n" + extra_config
    return Daemon(tmp_path, host_bytes=HOST_BYTES, slab_bytes="8MiB", nvme_bytes=nvme_bytes,
                  extra_config=extra_config)


@contextlib.contextmanager
def running(daemon, extra_args=()):
    """Starts the daemon, yields a client on its Unix socket, then stops it and checks a clean
    exit (SIGTERM is also what syncs the NVMe tier)."""
    daemon.start(extra_args)
    try:
        with RawClient(daemon.unix) as c:
            yield c
    finally:
        rc = daemon.stop()
    assert rc == 0, f"kvtierd did not stop cleanly (status {rc}):\n{daemon.log()}"


def nvme_metric(metrics, counter):
    """The /metrics sample of one NVMe device counter."""
    found = [value for (name, labels), value in metrics.items()
             if 'tier="nvme"' in labels and f'counter="{counter}"' in labels]
    assert len(found) == 1, (counter, sorted(k for k in metrics if "nvme" in k[1]))
    return found[0]


def settled(c, count):
    """Stats once the background mover is done: while it moves a block, the block is counted in
    both tiers. Nothing is lost here (the NVMe tier holds everything the host lets go), so the
    mover is done when the tiers hold `count` blocks together."""
    def together():
        stats = c.stats()
        return stats if tier_sum(stats, "blocks") == count else None
    stats = wait_for(together, 10)
    assert stats, c.stats()["tiers"]
    return stats


def fill(c, model, salt=1, count=BLOCKS):
    ns = register_ns(c, model, BLOCK_BYTES)
    put_blocks(c, ns, salt, range(count), BLOCK_BYTES)
    return ns


@BACKENDS
def test_spill_to_nvme_and_serve_from_it(tmp_path, backend):
    d = nvme_daemon(tmp_path, backend=backend)
    with running(d) as c:
        ns = fill(c, "nvme/spill")
        stats = settled(c, BLOCKS)
        host, nvme = tier(stats, "host"), tier(stats, "nvme")
        assert nvme is not None, stats["tiers"]
        assert host["used_bytes"] <= host["capacity_bytes"] == 32 * MIB
        assert nvme["capacity_bytes"] == 256 * MIB
        assert host["demotions"] > 0 and nvme["blocks"] > 0, stats["tiers"]
        # Nothing left the NVMe tier: it holds everything the host let go.
        assert nvme["evictions"] == 0 and nvme["drops"] == 0, stats["tiers"]

        # The oldest blocks went down first.
        assert lookup_each(c, ns, 1, range(10)) == ["nvme"] * 10
        # One read from NVMe: the right bytes, and the block is in host memory afterwards.
        assert get_each(c, ns, 1, [0]) == [payload(1, 0, BLOCK_BYTES)]
        assert lookup_each(c, ns, 1, [0]) == ["host"]

        # Every block, wherever it is now, reads back exactly.
        for n, got in zip(range(BLOCKS), get_each(c, ns, 1, range(BLOCKS))):
            assert got == payload(1, n, BLOCK_BYTES), f"block {n} read back wrong"

        stats = c.stats()
        assert tier_sum(stats, "promotions") > 0, stats["tiers"]
        assert tier_sum(stats, "corrupt_drops") == 0, stats["tiers"]
        counters = nvme_counters(stats)
        # A block read up keeps its copy on NVMe, and goes back into it without a write.
        demoted = tier(stats, "host")["demotions"] - tier(stats, "host")["copy_demotions"]
        assert counters["writes"] >= demoted
        assert counters["bytes_admitted"] >= demoted * BLOCK_BYTES
        assert counters["device_bytes_written"] >= counters["bytes_admitted"]
        assert counters["reads"] > 0 and counters["io_errors"] == 0

        # /metrics reads the same numbers: between two stats documents, since the mover may
        # still be at work.
        before = c.stats()
        metrics = parse_metrics(http_get(d, "/metrics"))
        after = c.stats()
        for field, metric in (("capacity_bytes", "kvtier_tier_capacity_bytes"),
                              ("demotions", "kvtier_tier_demotions_total"),
                              ("promotions", "kvtier_tier_promotions_total")):
            for name in ("host", "nvme"):
                value = metrics[(metric, f'tier="{name}"')]
                assert tier(before, name)[field] <= value <= tier(after, name)[field], \
                    (metric, name)
        for counter in ("writes", "reads", "device_bytes_written", "bytes_admitted"):
            value = nvme_metric(metrics, counter)
            assert nvme_counters(before)[counter] <= value <= nvme_counters(after)[counter], \
                counter

        # So do INFO and `kvtier stats`.
        before = c.stats()
        info = dict(line.split(":", 1) for line in c.call("INFO", "kvtier").decode().split("\r\n")
                    if ":" in line)
        after = c.stats()
        for counter in ("writes", "device_bytes_written", "recovered_blocks"):
            value = float(info[f"tier_nvme_{counter}"])
            assert nvme_counters(before)[counter] <= value <= nvme_counters(after)[counter], \
                counter
        assert int(info["tier_nvme_capacity_bytes"]) == 256 * MIB
        cli = subprocess.run([str(BIN_DIR / "kvtier"), "stats", "--url", f"unix://{d.unix}"],
                             capture_output=True, text=True, timeout=15)
        assert cli.returncode == 0, cli.stderr
        assert "nvme device:" in cli.stdout and " writes=" in cli.stdout, cli.stdout


@BACKENDS
def test_warm_restart_serves_the_nvme_blocks(tmp_path, backend):
    d = nvme_daemon(tmp_path, backend=backend)
    with running(d) as c:
        ns = fill(c, "nvme/warm")
        before = lookup_each(c, ns, 1, range(BLOCKS))
    on_nvme = [n for n, t in enumerate(before) if t == "nvme"]
    assert len(on_nvme) >= BLOCKS // 2, before

    with running(d) as c:
        assert register_ns(c, "nvme/warm", BLOCK_BYTES) == ns
        stats = c.stats()
        # The stop wrote the host tier's blocks to NVMe: the host tier starts empty, and NVMe
        # holds every block of the previous run.
        assert tier(stats, "host")["blocks"] == 0, stats["tiers"]
        assert nvme_counters(stats)["recovered_blocks"] == BLOCKS, nvme_counters(stats)
        assert stats["totals"]["pending_adoptions"] == 0, stats["totals"]
        after = lookup_each(c, ns, 1, range(BLOCKS))
        assert after == ["nvme"] * BLOCKS, after
        for n, got in zip(range(BLOCKS), get_each(c, ns, 1, range(BLOCKS))):
            assert got == payload(1, n, BLOCK_BYTES), f"block {n} read back wrong after restart"
    assert "flushed" in d.log(), d.log()

    # A cold start discards the NVMe tier, and a normal start after it finds nothing either.
    for extra_args in (["--cold-start"], []):
        with running(d, extra_args) as c:
            assert register_ns(c, "nvme/warm", BLOCK_BYTES) == ns
            assert lookup_each(c, ns, 1, range(BLOCKS)) == [None] * BLOCKS
            assert tier(c.stats(), "nvme")["blocks"] == 0


def set_values(c, count, size, salt):
    for n in range(count):
        assert c.call("SET", f"clean-stop:{n}", payload(salt, n, size)) == b"OK", n


def served_values(c, count, size, salt):
    """(served, wrong): how many values GET returns, and how many of those differ from what was
    SET."""
    served = wrong = 0
    for n in range(count):
        got = c.call("GET", f"clean-stop:{n}")
        if got is not None:
            served += 1
            wrong += got != payload(salt, n, size)
    return served, wrong


def test_a_clean_stop_keeps_the_host_tier(tmp_path):
    """3,000 values of 128 KiB (375 MiB) through a 32 MiB host tier: most live on NVMe, the newest
    in memory. SIGTERM writes those to NVMe, and the restart serves every value, none wrong."""
    count, size = 3000, 128 << 10
    d = nvme_daemon(tmp_path, nvme_bytes="1GiB")
    with running(d) as c:
        set_values(c, count, size, salt=7)
        before = c.stats()
    assert tier(before, "host")["blocks"] > 0, before["tiers"]
    with running(d) as c:
        stats = c.stats()
        assert tier(stats, "host")["blocks"] == 0, stats["tiers"]
        assert served_values(c, count, size, salt=7) == (count, 0)
    log = d.log()
    assert "flushed" in log and "blocks held in memory are not kept" not in log, log


def test_without_the_flush_a_stop_loses_what_was_in_memory(tmp_path):
    count, size = 600, 128 << 10  # 75 MiB: more than twice the host tier
    d = nvme_daemon(tmp_path, extra_config="shutdown:\n  flush: false\n")
    with running(d) as c:
        set_values(c, count, size, salt=8)
        in_memory = tier(settled(c, count), "host")["blocks"]
    assert in_memory > 0
    with running(d) as c:
        served, wrong = served_values(c, count, size, salt=8)
    assert wrong == 0
    assert served <= count - in_memory, (served, in_memory)
    assert "shutdown.flush is off" in d.log()


def test_a_flush_bounded_by_a_small_nvme_keeps_the_newest_values(tmp_path):
    """NVMe smaller than what was written: the flush gives up older NVMe blocks for the host
    tier's, and stops when NVMe holds only blocks it wrote; the newest values survive."""
    count, size = 600, 128 << 10  # 75 MiB through 32 MiB of host and 64 MiB of NVMe
    d = nvme_daemon(tmp_path, nvme_bytes="64MiB")
    with running(d) as c:
        set_values(c, count, size, salt=9)
    with running(d) as c:
        newest = [c.call("GET", f"clean-stop:{n}") for n in range(count - 100, count)]
        served, wrong = served_values(c, count, size, salt=9)
    assert all(v is not None for v in newest), "a value among the newest 100 was lost"
    assert wrong == 0
    assert served < count, "64 MiB of NVMe cannot hold 75 MiB of values"


def test_a_flush_makes_room_for_large_values_among_many_small_ones(tmp_path):
    """NVMe full of 4 KiB values (8 KiB records), then two 2 MiB values in memory: each needs 257
    or more small records gone. The flush used to stop at one allocation's eviction bound (256),
    take that for "NVMe is full of newer blocks" and keep none of the new values, the small ones
    it dropped lost for nothing. Now older values make room until the newer ones fit."""
    small, size = 6000, 2 << 20  # 23 MiB of small values through 16 MiB of host and 8 MiB of NVMe
    d = Daemon(tmp_path, host_bytes="16MiB", slab_bytes="8MiB", nvme_bytes="8MiB")
    big = [payload(10, n, size) for n in range(2)]
    with running(d) as c:
        replies = pipelined(c, [("SET", f"small:{n}", payload(11, n, 4000)) for n in range(small)])
        assert replies == [b"OK"] * small
        assert tier(c.stats(), "nvme")["blocks"] > 0, c.stats()["tiers"]

        def set_big(n):
            reply = c.call("SET", f"big:{n}", big[n])
            # Room in the host tier for a new size is made by the mover: retry until it is.
            assert reply == b"OK" or "BUSY" in str(reply), reply
            return reply == b"OK"
        for n in range(2):
            assert wait_for(lambda: set_big(n), 10), d.log()
    with running(d) as c:
        assert wait_for(d.recovered, timeout_s=10), d.log()
        assert [c.call("GET", f"big:{n}") == big[n] for n in range(2)] == [True, True], d.log()
    assert "blocks held in memory are not kept" not in d.log(), d.log()


def record_headers(nvme_dir):
    """(path, file offset, salt, number, payload bytes) of every record header in the data files,
    found by their magic at 4 KiB boundaries past the superblock."""
    records = []
    paths = sorted(p for p in nvme_dir.rglob("*.data") if p.is_file())
    assert paths, f"no data file under {nvme_dir}: {list(nvme_dir.rglob('*'))}"
    for path in paths:
        with open(path, "rb") as f:
            offset = SECTOR
            while True:
                f.seek(offset)
                header = f.read(SECTOR)
                if len(header) < SECTOR:
                    break
                if header[:8] == RECORD_MAGIC:
                    salt, number = struct.unpack(">QQ", header[32:48])
                    size = struct.unpack("<Q", header[48:56])[0]
                    records.append((path, offset, salt, number, size))
                offset += SECTOR
    return records


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x5A]))
        f.flush()
        os.fsync(f.fileno())


def acquire_each(c, ns, salt, numbers):
    """Each block's bytes as read from the shared arena under a KVT.ACQUIRE lease (one key per
    call), None where ACQUIRE answers NOTFOUND. A lease whose release is not OK is a torn copy."""
    info, fd = c.attach()
    try:
        arena = mmap.mmap(fd, int(info["arena_bytes"]), mmap.MAP_SHARED, mmap.PROT_READ)
    finally:
        os.close(fd)
    values = []
    with arena:
        for n in numbers:
            [(status, lease, offset, length)] = c.call("KVT.ACQUIRE", ns, key(salt, n))
            if status == b"NOTFOUND":
                values.append(None)
                continue
            assert status == b"OK", (n, status)
            values.append(arena[offset:offset + length])
            assert c.call("KVT.RELEASE", lease) == [b"OK"], n
    return values


# How the damaged blocks are read: GET promoting them (the default), GET reading them in place on
# NVMe, and a shared-memory lease, which brings them into the host arena first.
READ_PATHS = pytest.mark.parametrize("backend, read", [
    ("auto", "get"), ("threads", "get"), ("auto", "get-in-place"), ("auto", "acquire")])


@READ_PATHS
def test_damaged_bytes_on_disk_are_never_served(tmp_path, backend, read):
    config = "nvme:\n  promote_on_hit: false\n" if read == "get-in-place" else ""
    d = nvme_daemon(tmp_path, backend=backend, extra_config=config)
    with running(d) as c:
        ns = fill(c, "nvme/corrupt")
        stats = c.stats()
    assert tier(stats, "nvme")["blocks"] >= 20, stats["tiers"]

    records = [r for r in record_headers(d.nvme_dir) if r[2] == 1]
    assert len(records) >= 20, records
    assert all(size == BLOCK_BYTES for *_, size in records)
    # Payload damage in six blocks (first byte, middle, last byte), header damage in two (one in
    # the key, one in the payload checksum).
    payload_hit = records[:6]
    for i, (path, offset, _, _, size) in enumerate(payload_hit):
        flip(path, offset + SECTOR + (0, size // 2, size - 1)[i % 3])
    header_hit = records[6:8]
    flip(header_hit[0][0], header_hit[0][1] + 40)
    flip(header_hit[1][0], header_hit[1][1] + 60)
    damaged = {r[3] for r in payload_hit + header_hit}
    intact = {r[3] for r in records[8:]}

    with running(d) as c:
        assert register_ns(c, "nvme/corrupt", BLOCK_BYTES) == ns
        stats = c.stats()
        if read == "acquire":
            got = acquire_each(c, ns, 1, range(BLOCKS))
        else:
            got = get_each(c, ns, 1, range(BLOCKS))
        for n, value in enumerate(got):
            if n in damaged:
                assert value is None, f"damaged block {n} was served"
            elif n in intact:
                assert value == payload(1, n, BLOCK_BYTES), f"intact block {n} read back wrong"
            else:
                assert value in (None, payload(1, n, BLOCK_BYTES)), f"block {n} read back wrong"
        stats = c.stats()
        counters = nvme_counters(stats)
        # Header damage is found on the first read too: the restart does not read the headers.
        assert counters["checksum_failures"] >= len(damaged), counters
        assert tier_sum(stats, "corrupt_drops") >= len(damaged), stats["tiers"]
        # A block that failed its checksum is dropped, not tried again.
        assert lookup_each(c, ns, 1, sorted(damaged)) == [None] * len(damaged)
    assert "checksum" in d.log().lower()


def damage_catalog_files(d, names):
    """Flips 20 bytes in each catalog file whose name passes names()."""
    rng = random.Random(5)
    for path in sorted((d.nvme_dir / "catalog").iterdir()):
        if path.name == "LOCK" or not names(path.name) or path.stat().st_size == 0:
            continue
        data = bytearray(path.read_bytes())
        for _ in range(20):
            data[rng.randrange(len(data))] ^= 0xFF
        path.write_bytes(data)


# Damage to the NVMe directory other than a few flipped data bytes: the restart must be accepted
# (the tier starts cold or serves what it can still verify) and must never serve wrong bytes.
DAMAGE = {
    "catalog-every-file": lambda d: damage_catalog_files(d, lambda name: True),
    "catalog-log-and-tables": lambda d: damage_catalog_files(
        d, lambda name: name.endswith((".log", ".sst"))),
    "catalog-removed": lambda d: shutil.rmtree(d.nvme_dir / "catalog"),
    "data-file-truncated": lambda d: os.truncate(d.nvme_dir / "kvtier-nvme.data", 8 * MIB),
    "data-file-removed": lambda d: os.remove(d.nvme_dir / "kvtier-nvme.data"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_nvme_directory_restarts_and_serves_only_right_bytes(tmp_path, damage):
    d = nvme_daemon(tmp_path)
    with running(d) as c:
        ns = fill(c, "nvme/damaged-dir")
        assert tier(settled(c, BLOCKS), "nvme")["blocks"] > 0
    DAMAGE[damage](d)
    with running(d) as c:
        assert register_ns(c, "nvme/damaged-dir", BLOCK_BYTES) == ns
        for n, value in enumerate(get_each(c, ns, 1, range(BLOCKS))):
            assert value in (None, payload(1, n, BLOCK_BYTES)), f"block {n} read back wrong"
        # The tier keeps working.
        fill(c, "nvme/damaged-dir", salt=4)
        assert get_each(c, ns, 4, range(BLOCKS)) == [payload(4, n, BLOCK_BYTES)
                                                      for n in range(BLOCKS)]


def test_read_without_promotion_leaves_the_block_on_nvme(tmp_path):
    d = nvme_daemon(tmp_path, extra_config="nvme:\n  promote_on_hit: false\n")
    with running(d) as c:
        ns = fill(c, "nvme/no-promote")
        settled(c, BLOCKS)
        assert lookup_each(c, ns, 1, range(4)) == ["nvme"] * 4
        assert get_each(c, ns, 1, range(4)) == [payload(1, n, BLOCK_BYTES) for n in range(4)]
        assert lookup_each(c, ns, 1, range(4)) == ["nvme"] * 4
        stats = c.stats()
        assert tier_sum(stats, "promotions") == 0 and nvme_counters(stats)["reads"] >= 4


def test_mover_demotes_between_the_watermarks_without_puts(tmp_path):
    d = nvme_daemon(tmp_path, extra_config="placement:\n  high_watermark: 0.5\n"
                                           "  low_watermark: 0.25\n")
    with running(d) as c:
        # 24 MiB of blocks: three quarters of the host tier, so no put ever needs room.
        ns = fill(c, "nvme/mover", count=96)
        capacity = tier(c.stats(), "host")["capacity_bytes"]

        # Each time the host tier passes the high watermark (half of it) the mover takes it down
        # to the low one (a quarter); puts that land afterwards may leave it anywhere in between,
        # which is where a watermark pair lets it rest. So: at most half full once puts stop.
        def at_most_high_watermark():
            stats = c.stats()
            done = (tier(stats, "host")["used_bytes"] <= capacity // 2
                    and tier_sum(stats, "blocks") == 96)
            return stats if done else None
        stats = wait_for(at_most_high_watermark, 10)
        assert stats, c.stats()["tiers"]
        # The mover ran at least once (down to a quarter: 32 blocks of 256 KiB in host at most).
        assert tier(stats, "host")["demotions"] >= 96 - 64, stats["tiers"]
        # The oldest went down; everything still reads back.
        assert lookup_each(c, ns, 1, [0]) == ["nvme"]
        assert get_each(c, ns, 1, range(96)) == [payload(1, n, BLOCK_BYTES) for n in range(96)]


def test_data_file_of_another_format_version_is_refused(tmp_path):
    d = nvme_daemon(tmp_path)
    with running(d) as c:
        fill(c, "nvme/version", count=8)
    (path,) = [p for p in d.nvme_dir.rglob("*.data") if p.is_file()]
    with open(path, "r+b") as f:
        f.seek(8)  # superblock format version (docs/nvme-format.md)
        assert struct.unpack("<I", f.read(4)) == (1,)
        f.seek(8)
        f.write(struct.pack("<I", 2))
    with pytest.raises(RuntimeError):
        d.start()
    assert d.proc.returncode not in (None, 0)
    log = d.log()
    assert "version 2" in log and "version 1" in log and str(path.name) in log, log[-2000:]
    # The operator's way out: a cold start formats it again.
    with running(d, ["--cold-start"]) as c:
        assert tier(c.stats(), "nvme")["blocks"] == 0


def test_removed_blocks_stay_removed_across_a_restart(tmp_path):
    d = nvme_daemon(tmp_path)
    with running(d) as c:
        ns = fill(c, "nvme/removed", count=BLOCKS // 2)
        other = register_ns(c, "nvme/dropped", BLOCK_BYTES)
        put_blocks(c, other, 2, range(BLOCKS // 2), BLOCK_BYTES)
        settled(c, BLOCKS)
        assert lookup_each(c, ns, 1, range(8)) == ["nvme"] * 8
        assert lookup_each(c, other, 2, range(8)) == ["nvme"] * 8
        assert c.call("KVT.DEL", ns, b"".join(key(1, n) for n in range(4))) == 4
        assert c.call("KVT.DROP", other) == BLOCKS // 2
        # The mover may still demote host blocks until the stop: these at least are on NVMe.
        kept = {n for n, t in enumerate(lookup_each(c, ns, 1, range(BLOCKS // 2))) if t == "nvme"}
    with running(d) as c:
        assert register_ns(c, "nvme/removed", BLOCK_BYTES) == ns
        assert register_ns(c, "nvme/dropped", BLOCK_BYTES) == other
        assert lookup_each(c, other, 2, range(BLOCKS // 2)) == [None] * (BLOCKS // 2)
        after = lookup_each(c, ns, 1, range(BLOCKS // 2))
        found = {n for n, t in enumerate(after) if t == "nvme"}
        assert after[:4] == [None] * 4 and kept <= found, (after, sorted(kept))
        # Every block the NVMe tier serves again is one of those that were not removed.
        assert tier(c.stats(), "nvme")["blocks"] == len(found)


@pytest.mark.parametrize("new_value_on", ["host", "host-not-flushed", "nvme"])
def test_replaced_value_on_nvme_never_comes_back(tmp_path, new_value_on):
    """SET over a value that lives on NVMe: the old block's record must go with it, or a restart
    would serve the old value again. A new value in memory is written to NVMe at the stop, unless
    shutdown.flush is off: then the restart has no value at all, and still never the old one."""
    config = "nvme:\n  promote_on_hit: false\n"
    if new_value_on == "host-not-flushed":
        config += "shutdown:\n  flush: false\n"
    d = nvme_daemon(tmp_path, extra_config=config)
    old, new = b"\x01" * BLOCK_BYTES, b"\x02" * BLOCK_BYTES
    with running(d) as c:
        for i in range(16):
            assert c.call("SET", f"value:{i}", old) == b"OK"
        fill(c, "nvme/replaced", count=200)
        reads = nvme_counters(c.stats())["reads"]
        assert c.call("GET", "value:0") == old
        assert nvme_counters(c.stats())["reads"] == reads + 1, "value:0 was not on NVMe"
        for i in range(16):
            assert c.call("SET", f"value:{i}", new) == b"OK"
        if new_value_on == "nvme":
            fill(c, "nvme/replaced", salt=2, count=200)
        assert {c.call("GET", f"value:{i}") for i in range(16)} == {new}
    with running(d) as c:
        got = [c.call("GET", f"value:{i}") for i in range(16)]
        assert got == ([None] * 16 if new_value_on == "host-not-flushed" else [new] * 16)


def test_resized_nvme_tier_starts_cold(tmp_path):
    d = nvme_daemon(tmp_path)
    with running(d) as c:
        ns = fill(c, "nvme/resized")
        assert tier(settled(c, BLOCKS), "nvme")["blocks"] > 0
    d.nvme_bytes = "128MiB"
    with running(d) as c:
        assert register_ns(c, "nvme/resized", BLOCK_BYTES) == ns
        nvme = tier(c.stats(), "nvme")
        assert nvme["capacity_bytes"] == 128 * MIB and nvme["blocks"] == 0, nvme
        assert lookup_each(c, ns, 1, range(BLOCKS)) == [None] * BLOCKS
        fill(c, "nvme/resized", salt=3)
        assert get_each(c, ns, 3, range(BLOCKS)) == [payload(3, n, BLOCK_BYTES)
                                                      for n in range(BLOCKS)]


def admission_run(tmp_path, policy):
    """Reads 16 blocks once, then puts enough never-read blocks to push most of them out of the
    host tier; returns (stats, tiers of the read blocks, tiers of the first never-read ones)."""
    tmp_path.mkdir()
    d = nvme_daemon(tmp_path, extra_config=f"nvme:\n  admission: {policy}\n")
    with running(d) as c:
        ns = register_ns(c, f"nvme/admission-{policy}", BLOCK_BYTES)
        put_blocks(c, ns, 2, range(16), BLOCK_BYTES)
        assert get_each(c, ns, 2, range(16)) == [payload(2, n, BLOCK_BYTES) for n in range(16)]
        put_blocks(c, ns, 1, range(BLOCKS), BLOCK_BYTES)
        stats = c.stats()
        return stats, lookup_each(c, ns, 2, range(16)), lookup_each(c, ns, 1, range(16))


def test_reused_admission_keeps_never_read_blocks_off_nvme(tmp_path):
    stats_all, read_all, cold_all = admission_run(tmp_path / "all", "all")
    stats_reused, read_reused, cold_reused = admission_run(tmp_path / "reused", "reused")
    assert cold_all == ["nvme"] * 16
    # Which blocks the host tier keeps is the eviction policy's choice; a block that was read
    # must not be dropped on its way out, though, and most of these went to NVMe.
    for read in (read_all, read_reused):
        assert all(t in ("host", "nvme") for t in read) and read.count("nvme") >= 8, read
    assert cold_reused == [None] * 16, "never-read blocks were written to NVMe"
    assert tier_sum(stats_all, "admission_drops") == 0
    assert tier_sum(stats_reused, "admission_drops") > 0, stats_reused["tiers"]
    assert nvme_counters(stats_reused)["writes"] < nvme_counters(stats_all)["writes"]
    assert tier(stats_reused, "nvme")["blocks"] < tier(stats_all, "nvme")["blocks"]


def test_write_through_says_which_puts_are_in_memory_only(tmp_path):
    """With nvme.write_through, OK means the block is on NVMe too. Once an 8 MiB NVMe tier is full
    of write-through copies (they are the host blocks' shadows, which NVMe cannot evict), puts are
    stored in memory only and say so (BUSY), and are served all the same."""
    config = "nvme:\n  write_through: true\n"
    with running(nvme_daemon(tmp_path, nvme_bytes="8MiB", extra_config=config)) as c:
        ns = register_ns(c, "nvme/write-through", BLOCK_BYTES)
        count = 64  # 16 MiB: twice the NVMe tier, half the host tier
        words = []
        for i in range(0, count, 8):
            numbers = range(i, i + 8)
            words += c.call("KVT.PUT", ns, b"".join(key(1, n) for n in numbers),
                            *[payload(1, n, BLOCK_BYTES) for n in numbers])
        durable = words.count(b"OK")
        # The mover's threads make the copies in batches of their own: near the point where NVMe
        # fills, which of two concurrent batches got the last room is theirs to decide.
        assert set(words) == {b"OK", b"BUSY"} and words[0] == b"OK" and words[-1] == b"BUSY", words
        stats = c.stats()["totals"]
        assert (stats["write_throughs"], stats["write_through_failures"]) == \
            (durable, count - durable), stats
        for n, got in zip(range(count), get_each(c, ns, 1, range(count))):
            assert got == payload(1, n, BLOCK_BYTES), f"block {n} not served from memory"
        # A generic write answers as a whole: the error names why, and the value is stored.
        reply = c.call("SET", "in-memory-only", b"v" * 300_000)
        assert isinstance(reply, RespError) and str(reply).startswith(
            "BUSY stored in memory only (nvme.write_through): no room for its copy on NVMe"), reply
        assert c.call("GET", "in-memory-only") == b"v" * 300_000


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "data").mkdir()
    return tmp_path


def run_with_config(workdir, config_text, *args):
    """Runs kvtierd expecting it to exit by itself; returns (status, output)."""
    config = workdir / "kvtierd.yaml"
    config.write_text(config_text)
    cmd = [str(BIN_DIR / "kvtierd"), "--config", str(config), "--unix", str(workdir / "k.sock"),
           "--port", "0", "--http-port", "0", "--host-bytes", "32MiB",
           "--data-dir", str(workdir / "data"), *args]
    done = subprocess.run(cmd, capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
    return done.returncode, (done.stdout + done.stderr).decode(errors="replace")


def test_bad_nvme_size_flag_is_refused(workdir):
    status, out = run_with_config(workdir, "", "--nvme-bytes", "12furlongs")
    assert status != 0, out
    assert "--nvme-bytes" in out, out


@pytest.mark.parametrize("config_text, named", [
    ("nvme:\n  bytes: 64MiB\n  flux_capacitor: true\n", "nvme.flux_capacitor"),
    ("nvme:\n  admission: sometimes\n", "nvme.admission"),
    ("nvme:\n  io_backend: carrier-pigeon\n", "nvme.io_backend"),
    ("nvme:\n  bytes: 12furlongs\n", "nvme.bytes"),
    ("placement:\n  high_watermark: 0.5\n  low_watermark: 0.7\n", "placement.low_watermark"),
], ids=["unknown-key", "admission", "io-backend", "bytes", "watermarks"])
def test_bad_nvme_config_is_refused_naming_the_key(workdir, config_text, named):
    status, out = run_with_config(workdir, config_text)
    assert status != 0, out
    assert named in out, out


def test_write_through_without_an_nvme_tier_is_a_config_error(workdir):
    """Regression: write-through was accepted with the NVMe tier off, and puts answered OK with
    nothing durable."""
    status, out = run_with_config(workdir, "nvme: {write_through: true}\n", "--nvme-bytes", "0")
    assert status == 2, out
    assert "nvme.write_through" in out and "nvme.bytes is 0" in out, out
    assert not any((workdir / "data").iterdir()), "a refused start left files behind"


def test_without_nvme_tier_stats_say_why_and_all_works(tmp_path):
    d = nvme_daemon(tmp_path, nvme_bytes="0")
    with running(d) as c:
        stats = c.stats()
        assert tier(stats, "nvme") is None or tier(stats, "nvme")["capacity_bytes"] == 0
        note = stats["process"]["nvme_tier"]
        assert "nvme" in note.lower() and "not implemented" not in note, note
        ns = fill(c, "nvme/off")
        # Beyond the host tier, blocks are evicted and nothing is demoted.
        stats = c.stats()
        assert tier(stats, "host")["evictions"] > 0 and tier_sum(stats, "demotions") == 0
        got = get_each(c, ns, 1, range(BLOCKS))
        assert got[0] is None
        assert all(v in (None, payload(1, n, BLOCK_BYTES)) for n, v in enumerate(got))
        assert got[-1] == payload(1, BLOCKS - 1, BLOCK_BYTES)
    assert not d.nvme_dir.exists() or not any(d.nvme_dir.rglob("*.data"))


def test_generic_key_names_and_expiry_across_restarts(tmp_path):
    """A clean stop keeps the generic keys' names and expiry times with their values
    (daemon/server/generic_keys_file.h): SCAN and KEYS list them after the restart and an expiry
    runs on. A crash keeps no names: the values on NVMe come back, GET serves them, a key is
    listed again once a command names it, without an expiry; FLUSHDB removes the values no
    command has named (docs/protocol.md, "Key space: names and expiry")."""
    d = nvme_daemon(tmp_path)
    with running(d) as c:
        assert c.call("SET", "ttl", b"v1", "EX", "100000") == b"OK"
        assert c.call("SET", "plain", b"v2") == b"OK"
        assert c.call("SET", "short", b"v3", "PX", "1500") == b"OK"
    d.start()
    try:
        assert "generic key names read back" in d.log()
        assert wait_for(d.recovered, timeout_s=10), d.log()
        with RawClient(d.unix) as c:
            # Names and times only: no value is read, so each stays where the restart found it.
            assert c.call("TTL", "ttl") in range(99_000, 100_001)
            assert c.call("TTL", "plain") == -1
            assert wait_for(lambda: c.call("TTL", "short") == -2, timeout_s=10)
            assert sorted(c.call("KEYS", "*")) == [b"plain", b"ttl"]
    finally:
        d.kill()
    with running(d) as c:
        assert wait_for(d.recovered, timeout_s=10), d.log()
        assert c.call("KEYS", "*") == []
        assert c.call("GET", "ttl") == b"v1"
        assert c.call("KEYS", "*") == [b"ttl"]
        assert c.call("TTL", "ttl") == -1
        assert c.call("FLUSHDB") == b"OK"
        assert c.call("GET", "plain") is None
        assert c.call("DBSIZE") == 0


def test_a_start_that_cannot_listen_keeps_the_generic_key_names(tmp_path):
    """The names and expiry times kept by a clean stop are read (and their file removed) once
    per start: a start that fails on a port in use, TCP or HTTP, must leave them to the next."""
    d = nvme_daemon(tmp_path)
    with running(d) as c:
        assert c.call("SET", "ttl", b"v1", "EX", "100000") == b"OK"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        for port, http_port in ((busy, free_port()), (free_port(), busy)):
            cmd = [str(BIN_DIR / "kvtierd"), "--config", str(d.workdir / "kvtierd.yaml"),
                   "--unix", d.unix, "--port", str(port), "--http-port", str(http_port),
                   "--host-bytes", d.host_bytes, "--data-dir", d.data_dir,
                   "--nvme-bytes", str(d.nvme_bytes)]
            failed = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            assert failed.returncode != 0, failed.stdout + failed.stderr
            assert "in use" in failed.stdout + failed.stderr, failed.stdout + failed.stderr
    with running(d) as c:
        assert c.call("TTL", "ttl") in range(99_000, 100_001), d.log()
        assert c.call("KEYS", "*") == [b"ttl"]
        assert c.call("GET", "ttl") == b"v1"


def test_a_hangup_is_a_clean_stop(tmp_path):
    """SIGHUP (the terminal of a foreground kvtierd closed) stops it as SIGTERM does: what it held
    in memory is flushed to NVMe and served after the restart."""
    d = nvme_daemon(tmp_path)
    d.start()
    with RawClient(d.unix) as c:
        assert c.call("SET", "kept", b"v1") == b"OK"
    d.proc.send_signal(signal.SIGHUP)
    assert d.proc.wait(timeout=60) == 0, d.log()
    assert "Hangup: shutting down" in d.log(), d.log()
    with running(d) as c:
        assert wait_for(d.recovered, timeout_s=10), d.log()
        assert c.call("GET", "kept") == b"v1"


def stopped_state(proc):
    """True once the process is stopped (SIGSTOP taken): /proc/<pid>/stat says T."""
    with open(f"/proc/{proc.pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.parametrize("first, second", [(signal.SIGHUP, signal.SIGTERM),
                                           (signal.SIGINT, signal.SIGTERM)],
                         ids=["HUP-then-TERM", "INT-then-TERM"])
def test_a_second_signal_before_the_flush_begins_does_not_cut_it_short(tmp_path, first, second):
    """Two stop signals at once (a terminal closing, an impatient operator, a service manager
    following up): the second came while the daemon was still stopping its server, and the flush's
    watcher took it as "cut the flush short" before the flush had written anything. Only a signal
    sent once the flush runs cuts it short. Both are sent while the daemon is stopped (SIGSTOP), so
    both are pending when it goes on: the first starts the stop, the second is the early one."""
    count, size = 20, 1 << 20  # 20 MiB: all of it in the 32 MiB host tier
    d = nvme_daemon(tmp_path)
    d.start()
    with RawClient(d.unix) as c:
        for n in range(count):
            assert c.call("SET", f"early:{n}", payload(12, n, size)) == b"OK"
        assert tier(c.stats(), "nvme")["blocks"] == 0, c.stats()["tiers"]
    d.proc.send_signal(signal.SIGSTOP)
    assert wait_for(lambda: stopped_state(d.proc), 10)
    d.proc.send_signal(first)
    d.proc.send_signal(second)
    d.proc.send_signal(signal.SIGCONT)
    assert d.proc.wait(timeout=60) == 0, d.log()
    log = d.log()
    assert "cutting the flush to NVMe short" not in log, log
    assert "does not cut the flush short" in log, log
    with running(d) as c:
        assert wait_for(d.recovered, timeout_s=10), d.log()
        assert all(c.call("GET", f"early:{n}") == payload(12, n, size) for n in range(count))
    assert "blocks held in memory are not kept" not in d.log(), d.log()
