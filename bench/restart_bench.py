"""A clean stop and restart of a live kvtierd: values written (more than the host tier holds, so
most live on NVMe and the newest in memory), SIGTERM, a restart on the same data directory, and
every value read back and compared.

Prints "NAME VALUE UNIT" lines (bench/README.md):
  clean_restart_served_fraction  values served after the restart / values written (target >= 0.99)
  clean_restart_wrong_values     values served with other bytes than were written (target 0)
  clean_stop_seconds             SIGTERM to exit: the flush of the host tier to NVMe, informative
  clean_restart_ready_seconds    start to serving every recovered block, informative

Standard library only: run it with any python3, after building build/bin/kvtierd. It starts and
stops its own daemon in a temporary directory through the integration tests' harness
(tests/integration/kvtierd_process.py and helpers.py, also standard library only); --quick writes
fewer values.
"""
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "integration"))
from helpers import RawClient  # noqa: E402
from kvtierd_process import Daemon  # noqa: E402

VALUE_BYTES = 128 << 10


def value(n):
    seed = n.to_bytes(8, "little")
    return (seed * (VALUE_BYTES // 8))[:VALUE_BYTES]


def timed(fn):
    started = time.monotonic()
    result = fn()
    return result, time.monotonic() - started


def main():
    quick = "--quick" in sys.argv[1:]
    count = 1200 if quick else 4000  # 150 MiB or 500 MiB through a 64 MiB host tier
    with tempfile.TemporaryDirectory(prefix="kvtier-restart-bench.") as tmp:
        d = Daemon(tmp, host_bytes="64MiB", nvme_bytes="1GiB")
        d.start()
        try:
            with RawClient(d.unix, timeout_s=30) as c:
                for n in range(count):
                    c.call("SET", f"restart:{n}", value(n))
        finally:
            rc, stop_s = timed(d.stop)
        if rc != 0:
            raise RuntimeError(f"kvtierd exited with {rc} at SIGTERM:\n{d.log()}")
        # start() returns once every recovered block is served (pending_adoptions 0).
        _, ready_s = timed(d.start)
        served = wrong = 0
        try:
            with RawClient(d.unix, timeout_s=30) as c:
                for n in range(count):
                    got = c.call("GET", f"restart:{n}")
                    if got is not None:
                        served += 1
                        wrong += got != value(n)
        finally:
            d.stop()
    print(f"clean_restart_served_fraction {served / count:.4f} ratio")
    print(f"clean_restart_wrong_values {wrong} count")
    print(f"clean_stop_seconds {stop_s:.3g} s")
    print(f"clean_restart_ready_seconds {ready_s:.3g} s")


if __name__ == "__main__":
    main()
