#!/usr/bin/env python3
"""The remote tier on a Redis Cluster (Debian's redis-server, 3 masters on loopback, no replicas):
how fast kvtierd fetches blocks from it, against redis-benchmark reading the same cluster, and how
much of one node's hit ratio two nodes sharing it keep.

Prints one line per figure, "NAME VALUE UNIT" (bench/README.md explains them):

  remote_get_gib_per_s_kvtierd          2 MiB blocks that a fresh kvtierd fetches from the
                                        cluster into its host tier and serves (kvtier bench
                                        --only get, shared memory), GiB/s
  remote_get_gib_per_s_redis_benchmark  redis-benchmark --cluster GET of 2 MiB values, GiB/s
  remote_get_ratio_to_redis_benchmark   kvtierd over redis-benchmark (target >= 0.8)
  cross_node_block_hit_ratio_one_node   kvtier replay of the conversation trace through one
                                        node (a small host tier, the cluster below it)
  cross_node_block_hit_ratio_two_nodes  the same requests split between two nodes, the even ones
                                        through one and the odd ones through the other, at once
  cross_node_hit_ratio                  two nodes over one (target >= 0.97)

Fetching: a writer node puts CLIENTS x BLOCKS_PER_CLIENT blocks with write-through and waits
until all are in the cluster; then, each round, a fresh reader node (nothing local) gets them with
CLIENTS threads, one block per call; a round counts only if every block was served (the reader
checks each record's checksum as it fetches it). redis-benchmark reads 2 MiB values with the same
number of connections. The figure of each is its best round of ROUNDS, taking turns. The nodes run
on the daemon's defaults for memory (the host tier locked and touched at start), not the tests'.

Sharing: both configurations write every block through to the cluster as it is put
(remote.write_through), so that a block one node computed is there for the other; a host tier of
HOST_BYTES, 16 KiB per trace block, the first 2,000 requests (500 with --quick), sent at their
trace times 20 times faster (`--speed`, passed to `kvtier replay --speed`), so that the two halves interleave as the
trace's clients did. `kvtier replay` checks every byte it reads: a wrong block stops the bench.

Starts its own cluster and kvtierd nodes (binaries from KVTIER_BIN_DIR, default build/bin) in a
temporary directory. --quick: fewer rounds and requests; --fetch-only: the fetch figures alone.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from kvtierd_process import BIN_DIR, Daemon  # noqa: E402
from redis_server import RedisCluster  # noqa: E402

TRACE = REPO / "tests" / "data" / "mooncake_conversation_trace.jsonl"
BLOCK = "2MiB"
CLIENTS = 4
BLOCKS_PER_CLIENT = 32
HOST_BYTES = "64MiB"
# The trace's requests at their arrival times, this many times faster (2,000 requests in 33 s);
# --speed changes it (0: each replay as fast as its node answers).
DEFAULT_SPEED = 20
REMOTE_CONFIG = """\
remote:
  write_through: {write_through}
limits:
  mover_wait_ms: 5000
"""


def figure(name: str, value: float, unit: str) -> None:
    print(f"{name} {value:.4g} {unit}", flush=True)


def kvtier(*args: str) -> dict:
    done = subprocess.run([str(BIN_DIR / "kvtier"), *args, "--json"], capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"kvtier {args[0]} failed: {done.stderr}")
    return json.loads(done.stdout)


def totals(node: Daemon) -> dict:
    with urllib.request.urlopen(node.http_url + "/stats", timeout=5) as resp:
        return json.load(resp)["totals"]


def start_node(workdir: pathlib.Path, cluster: RedisCluster, host_bytes: str,
               write_through: bool) -> Daemon:
    workdir.mkdir()
    node = Daemon(workdir, host_bytes=host_bytes,
                  extra_config=REMOTE_CONFIG.format(write_through=str(write_through).lower()))
    # The daemon's own defaults, as an operator runs it: the host tier's memory locked (and so
    # touched) at start, huge pages where the system has them, rather than the tests' settings.
    node.config_text = node.config_text.replace("huge_pages: false", "huge_pages: true") \
        .replace("mlock: false", "mlock: true")
    node.start(extra_args=["--remote", cluster.url])
    return node


def redis_benchmark_get_gib_per_s(cluster: RedisCluster, requests: int) -> float:
    """GET of 2 MiB values over CLIENTS connections, from redis-benchmark's own rate."""
    common = ["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p", str(cluster.ports[0]),
              "-d", str(2 << 20), "-r", "64", "-c", str(CLIENTS), "-q"]
    done = subprocess.run(common + ["-t", "get", "-n", str(requests)], capture_output=True,
                          text=True, timeout=600, check=True)
    rate = re.findall(r"GET: ([0-9.]+) requests per second", done.stdout)
    if not rate:
        raise RuntimeError("redis-benchmark printed no GET rate:\n" + done.stdout)
    return float(rate[-1]) * (2 << 20) / (1 << 30)


def fetch_figures(tmp: pathlib.Path, rounds: int) -> None:
    cluster = RedisCluster(tmp / "fetch-cluster", replicas=0)
    writer = None
    try:
        blocks = CLIENTS * BLOCKS_PER_CLIENT
        writer = start_node(tmp / "writer", cluster, "1GiB", write_through=True)
        common = ["--block-bytes", BLOCK, "--concurrency", str(CLIENTS), "--count",
                  str(BLOCKS_PER_CLIENT), "--salt", "remote-bench"]
        put = kvtier("bench", "--url", f"unix://{writer.unix}", *common, "--only", "put", "--keep")
        if put["put"]["blocks_ok"] != blocks:
            raise RuntimeError(f"the writer stored {put['put']['blocks_ok']} of {blocks} blocks")
        deadline = time.monotonic() + 60
        while totals(writer)["remote_publishes"] < blocks:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the writer published {totals(writer)['remote_publishes']} "
                                   f"of {blocks} blocks")
            time.sleep(0.1)
        # redis-benchmark's values, as many keys again (each of its clients' keys is one of 64
        # per node): SET until every one exists.
        subprocess.run(["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p",
                        str(cluster.ports[0]), "-d", str(2 << 20), "-r", "64", "-c",
                        str(CLIENTS), "-q", "-t", "set", "-n", "2048"],
                       capture_output=True, timeout=600, check=True)
        best_kvtierd = best_redis = 0.0
        for r in range(rounds):
            reader = start_node(tmp / f"reader{r}", cluster, "1GiB", write_through=False)
            try:
                got = kvtier("bench", "--url", f"unix://{reader.unix}", *common, "--only", "get",
                             "--keep")["get"]
            finally:
                reader.stop()
                shutil.rmtree(tmp / f"reader{r}", ignore_errors=True)
            if got["blocks_ok"] != blocks:
                raise RuntimeError(f"the reader served {got['blocks_ok']} of {blocks} blocks")
            best_kvtierd = max(best_kvtierd, got["gib_per_s"])
            best_redis = max(best_redis, redis_benchmark_get_gib_per_s(cluster, 4 * blocks))
        figure("remote_get_gib_per_s_kvtierd", best_kvtierd, "GiB/s")
        figure("remote_get_gib_per_s_redis_benchmark", best_redis, "GiB/s")
        figure("remote_get_ratio_to_redis_benchmark", best_kvtierd / best_redis, "ratio")
    finally:
        if writer is not None:
            writer.stop()
        cluster.close()


def replay(node: Daemon, trace: pathlib.Path, salt: str, speed: float) -> subprocess.Popen:
    return subprocess.Popen(
        [str(BIN_DIR / "kvtier"), "replay", str(trace), "--url", f"unix://{node.unix}",
         "--block-bytes", "16KiB", "--salt", salt, "--speed", str(speed), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError("kvtier replay failed: " + err)
    return json.loads(out)


def sharing_figures(tmp: pathlib.Path, requests: int, speed: float = DEFAULT_SPEED) -> None:
    lines = TRACE.read_text().splitlines()[:requests]
    traces = {}
    for name, part in (("whole", lines), ("even", lines[0::2]), ("odd", lines[1::2])):
        traces[name] = tmp / f"{name}.jsonl"
        traces[name].write_text("\n".join(part) + "\n")
    cluster = RedisCluster(tmp / "sharing-cluster", replicas=0)
    try:
        one = start_node(tmp / "one", cluster, HOST_BYTES, write_through=True)
        try:
            alone = finish(replay(one, traces["whole"], "one-node", speed))
        finally:
            one.stop()
        pair = [start_node(tmp / name, cluster, HOST_BYTES, write_through=True)
                for name in ("first", "second")]
        try:
            procs = [replay(node, traces[half], "two-nodes", speed)
                     for node, half in zip(pair, ("even", "odd"))]
            halves = [finish(p) for p in procs]
        finally:
            for node in pair:
                node.stop()
    finally:
        cluster.close()
    one_ratio = alone["block_hit_ratio"]
    two_ratio = sum(h["served_blocks"] for h in halves) / sum(h["blocks"] for h in halves)
    figure("cross_node_block_hit_ratio_one_node", one_ratio, "ratio")
    figure("cross_node_block_hit_ratio_two_nodes", two_ratio, "ratio")
    figure("cross_node_hit_ratio", two_ratio / one_ratio, "ratio")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and requests")
    parser.add_argument("--fetch-only", action="store_true",
                        help="only the fetch figures (remote_get_*), not the sharing ones")
    parser.add_argument("--speed", type=float, default=DEFAULT_SPEED,
                        help="replay the trace this many times faster than its arrival times "
                             "(0: as fast as the nodes answer)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvtier-remote-bench-") as tmp:
        fetch_figures(pathlib.Path(tmp), rounds=2 if args.quick else 4)
        if not args.fetch_only:
            sharing_figures(pathlib.Path(tmp), requests=500 if args.quick else 2000,
                            speed=args.speed)


if __name__ == "__main__":
    main()
