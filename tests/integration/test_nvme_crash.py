"""kill -9 under load, again and again: after every crash kvtierd starts again on the same data
directory, and every block it reports reads back with the right bytes.

A writer thread puts blocks continuously (mixed with reads of earlier ones) into a small host tier
that spills to NVMe, and the daemon is SIGKILLed at a random moment. Payloads are a function of
their key, so the check needs no record of which puts were acknowledged: after the restart every
key written so far is looked up, and each one reported present must read back exactly. Host
blocks are lost in a crash by design; NVMe blocks survive it (docs/nvme-format.md, "Ordering
rules": a kill -9 loses nothing that was written). The same loop runs with the SIGKILL landing
inside a graceful stop, and with write-through on, where no acknowledged put may be lost; a last
test kills the daemon again and again while it recovers at start-up.

KVTIER_CRASH_ITERATIONS sets the number of crashes (default 20, the minimum CI runs),
KVTIER_CRASH_SEED the random moments (printed on failure so a run can be repeated) and
KVTIER_CRASH_IO_BACKEND the NVMe I/O backend (default auto: io_uring where the kernel allows it).
"""
import os
import random
import signal
import threading
import time

import pytest

from helpers import RawClient
from kvtierd_process import Daemon
from nvme_helpers import (get_each, key, lookup_each, nvme_counters, payload, put_blocks,
                          register_ns, tier_sum)

ITERATIONS = int(os.environ.get("KVTIER_CRASH_ITERATIONS", "20"))
SEED = int(os.environ.get("KVTIER_CRASH_SEED", str(random.randrange(1 << 32))))
BLOCK_BYTES = 16 << 10
PER_PUT = 4
# Puts are paced (reads fill the time between them) so that the crash, 0.3 to 1.5 s into the load,
# finds anything from a host tier still filling up to one that spills, and so that the check after
# each restart, which reads back every block present, stays short.
PUT_BLOCKS_PER_S = 300
IO_BACKEND = os.environ.get("KVTIER_CRASH_IO_BACKEND", "auto")
# A small host tier (256 blocks) that the mover keeps between 30% and 60% full, so blocks go to
# NVMe while the load runs and the kill meets demotions in flight.
NVME_CONFIG = f"""\
nvme:
  io_backend: {IO_BACKEND}
  sync_interval_ms: 200
"""
PLACEMENT_CONFIG = """\
placement:
  high_watermark: 0.6
  low_watermark: 0.3
"""
CONFIG = NVME_CONFIG + PLACEMENT_CONFIG
MODEL = "nvme/crash"
# Enough for everything the writer puts in all iterations (under 10,000 blocks), so nothing is
# evicted from NVMe and a present block can only disappear between LOOKUP and GET through a fault.
NVME_BYTES = "256MiB"


@pytest.fixture(autouse=True)
def _drop_nvme_data_files(tmp_path):
    """Removes the preallocated data files after each test (pytest keeps the directories of the
    last runs, and these hold hundreds of MiB each); logs and catalogs stay."""
    yield
    for path in tmp_path.rglob("kvtier-nvme.data"):
        path.unlink()


class Writer(threading.Thread):
    """Puts blocks (salt, 0), (salt, 1), ... PER_PUT at a time, PUT_BLOCKS_PER_S on average, and
    in between reads earlier blocks back, until its connection breaks. Wrong bytes are recorded,
    not raised, so that the main thread can report them."""

    def __init__(self, unix, ns, salt, rng):
        super().__init__(name=f"writer-{salt}")
        self.unix, self.ns, self.salt, self.rng = unix, ns, salt, rng
        self.sent = 0  # blocks whose put was sent (acknowledged or not)
        self.acked = []  # blocks whose put was answered OK
        self.wrong = []
        self.started = threading.Event()

    def run(self):
        try:
            with RawClient(self.unix, timeout_s=10) as c:
                self.started.set()
                began = time.monotonic()
                while True:
                    if self.sent > PUT_BLOCKS_PER_S * (time.monotonic() - began):
                        self.read_one(c)
                        continue
                    numbers = range(self.sent, self.sent + PER_PUT)
                    self.sent += PER_PUT
                    reply = c.call("KVT.PUT", self.ns,
                                   b"".join(key(self.salt, n) for n in numbers),
                                   *[payload(self.salt, n, BLOCK_BYTES) for n in numbers])
                    if isinstance(reply, list):
                        self.acked += [n for n, r in zip(numbers, reply) if r == b"OK"]
                    self.read_one(c)
        except (ConnectionError, OSError):
            pass  # the daemon was killed
        finally:
            self.started.set()

    def read_one(self, c):
        n = self.rng.randrange(self.sent)
        got = c.call("KVT.GET", self.ns, key(self.salt, n))
        if got not in ([None], [payload(self.salt, n, BLOCK_BYTES)]):
            self.wrong.append(n)


def check_everything(c, ns, written):
    """Looks up every key written so far; each present one must read back exactly. Returns
    (present, blocks that LOOKUP reported but GET missed)."""
    present, missed = 0, []
    for salt, count in written.items():
        numbers = list(range(count))
        tiers = lookup_each(c, ns, salt, numbers)
        assert all(t in (None, "nvme") for t in tiers), \
            f"after a crash the host tier must start empty: {set(tiers)}"
        found = [n for n, t in zip(numbers, tiers) if t]
        present += len(found)
        for n, got in zip(found, get_each(c, ns, salt, found)):
            if got is None:
                missed.append((salt, n))
            else:
                assert got == payload(salt, n, BLOCK_BYTES), \
                    f"block ({salt}, {n}) read back wrong after a crash"
    return present, missed


def check_after_restart(d, written, context):
    """Registers the namespace again and checks every block written so far; returns the namespace
    and how many blocks the NVMe tier recovered."""
    with RawClient(d.unix) as c:
        ns = register_ns(c, MODEL, BLOCK_BYTES)
        recovered = int(nvme_counters(c.stats())["recovered_blocks"])
        present, missed = check_everything(c, ns, written)
        # Each block recovered is one the writer sent, and LOOKUP finds it.
        assert present == recovered, (context, present, recovered)
        stats = c.stats()
        assert tier_sum(stats, "corrupt_drops") == 0, (context, stats["tiers"])
        counters = nvme_counters(stats)
        assert counters["io_errors"] == 0 and counters["checksum_failures"] == 0, \
            (context, counters)
        assert not missed, (context, missed)
    return ns, recovered


def crash_loop(tmp_path, iterations, crash, config=CONFIG, durable=False):
    """Runs the writer against kvtierd, crashes it with crash(daemon, rng) at a random moment,
    restarts it and checks every block, `iterations` times. With `durable`, every put ever
    acknowledged must also be there after each restart. Returns the blocks recovered at each
    restart."""
    rng = random.Random(SEED)
    d = Daemon(tmp_path, host_bytes="4MiB", slab_bytes="1MiB", nvme_bytes=NVME_BYTES,
               extra_config=config)
    written = {}  # salt -> blocks sent under it
    acked = {}  # salt -> blocks acknowledged under it
    recovered = []
    started = time.monotonic()
    try:
        d.start()
        with RawClient(d.unix) as c:
            ns = register_ns(c, MODEL, BLOCK_BYTES)
        for iteration in range(iterations):
            context = f"iteration {iteration}, KVTIER_CRASH_SEED={SEED}"
            salt = iteration + 1
            writer = Writer(d.unix, ns, salt, random.Random(rng.random()))
            writer.start()
            writer.started.wait(10)
            time.sleep(rng.uniform(0.3, 1.5))  # the random moment of the crash
            crash(d, rng)
            writer.join(15)
            assert not writer.is_alive(), context
            assert not writer.wrong, (context, writer.wrong)
            written[salt] = writer.sent
            acked[salt] = writer.acked
            # A restart after a crash must never be refused (Daemon.start raises with the log).
            d.start()
            ns, count = check_after_restart(d, written, context)
            recovered.append(count)
            if durable:
                check_acknowledged(d, ns, acked, context)
    finally:
        rc = d.stop()
    assert rc == 0, d.log()
    # The load reached NVMe before most crashes: otherwise the loop checked little.
    assert sum(1 for n in recovered if n) >= iterations // 2, recovered
    print(f"{iterations} crashes in {time.monotonic() - started:.1f} s, "
          f"{sum(written.values())} blocks sent, blocks recovered at each restart: {recovered}")
    return recovered


def check_acknowledged(d, ns, acked, context):
    with RawClient(d.unix) as c:
        for salt, numbers in acked.items():
            tiers = lookup_each(c, ns, salt, numbers)
            lost = [n for n, t in zip(numbers, tiers) if t is None]
            assert not lost, (context, f"acknowledged puts lost under salt {salt}", lost)
        assert c.stats()["totals"]["write_through_failures"] == 0, context


def test_kill9_under_load_then_every_reported_block_reads_back(tmp_path):
    crash_loop(tmp_path, ITERATIONS, lambda d, rng: d.kill())


def kill9_during_graceful_stop(d, rng):
    # SIGTERM starts the stop (connections closing, the final NVMe sync); the SIGKILL lands
    # somewhere in it.
    d.proc.send_signal(signal.SIGTERM)
    time.sleep(rng.uniform(0, 0.03))
    d.kill()


def test_kill9_during_a_graceful_stop(tmp_path):
    crash_loop(tmp_path, max(5, ITERATIONS // 2), kill9_during_graceful_stop)


def test_kill9_with_write_through_loses_no_acknowledged_put(tmp_path):
    # Write-through writes every put to NVMe before acknowledging it. Reads promote (the default):
    # each restart's check reads the blocks up into the host tier, and the next crash must still
    # find them on NVMe, because a promotion keeps a write-through block's NVMe copy.
    config = NVME_CONFIG + "  write_through: true\n" + PLACEMENT_CONFIG
    crash_loop(tmp_path, max(5, ITERATIONS // 2), lambda d, rng: d.kill(),
               config=config, durable=True)


def test_kill9_during_start_up_recovery_loses_nothing(tmp_path):
    """A daemon killed while it opens the data file or loads the catalog has changed nothing: the
    next start still serves every block that was on NVMe."""
    d = Daemon(tmp_path, host_bytes="4MiB", slab_bytes="1MiB", nvme_bytes=NVME_BYTES,
               extra_config=CONFIG)
    count = 2000
    try:
        d.start()
        with RawClient(d.unix) as c:
            ns = register_ns(c, MODEL, BLOCK_BYTES)
            put_blocks(c, ns, 1, range(count), BLOCK_BYTES, per_call=32)
        assert d.stop() == 0, d.log()
        # What the NVMe tier holds after the stop (the mover may demote until then).
        d.start()
        with RawClient(d.unix) as c:
            register_ns(c, MODEL, BLOCK_BYTES)
            on_nvme = [n for n, t in enumerate(lookup_each(c, ns, 1, range(count))) if t]
        assert len(on_nvme) > count // 2
        rng = random.Random(SEED)
        for _ in range(10):
            d.kill()
            d.start(wait=False)
            time.sleep(rng.uniform(0, 0.15))
        d.kill()
        d.start()
        with RawClient(d.unix) as c:
            assert register_ns(c, MODEL, BLOCK_BYTES) == ns
            assert nvme_counters(c.stats())["recovered_blocks"] == len(on_nvme)
            assert lookup_each(c, ns, 1, on_nvme) == ["nvme"] * len(on_nvme)
            for n, got in zip(on_nvme, get_each(c, ns, 1, on_nvme)):
                assert got == payload(1, n, BLOCK_BYTES), f"block {n} read back wrong"
    finally:
        rc = d.stop()
    assert rc == 0, d.log()
