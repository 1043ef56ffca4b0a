#!/usr/bin/env python3
"""LMCache's multi-process `resp` L2 adapter (PyPI lmcache 0.5.6, its compiled RESP client)
storing and loading 4 MiB chunks through kvtierd, against the same through Debian's redis-server,
in the same run.

Prints one line per figure, "NAME VALUE UNIT" (bench/README.md explains them):

  lmcache_put_gib_per_s_kvtierd   chunks stored through kvtierd (SET), GiB/s
  lmcache_put_gib_per_s_redis     the same through redis-server
  lmcache_get_gib_per_s_kvtierd   the chunks loaded back (GET), GiB/s
  lmcache_get_gib_per_s_redis     the same from redis-server
  lmcache_put_ratio_to_redis      kvtierd over redis-server, storing
  lmcache_get_ratio_to_redis      kvtierd over redis-server, loading (target >= 1.0)

Each round stores CHUNKS chunks of 4 MiB (2 x 8 layers x 256 tokens x 512 bf16: an LMCache chunk
of a small model) as one batch, then loads them as one batch, with the adapter's 4 connection
threads; the figure of each server is its best round of ROUNDS, the servers taking turns. Both
servers run on loopback on this machine, kvtierd with a 1 GiB host tier and no NVMe tier,
redis-server with persistence off. The loaded chunks are checked against the stored ones: a
wrong byte stops the bench.

Starts its own kvtierd (binaries from KVTIER_BIN_DIR, default build/bin) and redis-server in a
temporary directory. Needs build/venv-py with torch and lmcache (scripts/python-venv.sh makes it).
--quick: fewer rounds.
"""
from __future__ import annotations

import argparse
import pathlib
import select
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import torch  # noqa: E402  (before lmcache: its compiled client links libtorch)
from lmcache.v1.distributed.api import ObjectKey  # noqa: E402
from lmcache.v1.distributed.l2_adapters import create_l2_adapter  # noqa: E402
from lmcache.v1.distributed.l2_adapters.config import get_l2_adapter_config_class  # noqa: E402
from lmcache.v1.memory_allocators.ad_hoc_memory_allocator import AdHocMemoryAllocator  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402

from kvtierd_process import Daemon, free_port  # noqa: E402
from redis_server import redis_server  # noqa: E402

SHAPE = torch.Size([2, 8, 256, 512])  # K/V, layers, tokens, hidden: 4 MiB of bf16
CHUNKS = 64
WORKERS = 4
TIMEOUT_MS = 60_000


def figure(name: str, value: float, unit: str) -> None:
    print(f"{name} {value:.4g} {unit}", flush=True)


def wait(fd: int) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if not poller.poll(TIMEOUT_MS):
        raise SystemExit("the L2 adapter did not finish in time")


def one_round(host: str, port: int, round_no: int, stored: list, loaded: list) -> tuple:
    """Stores and loads CHUNKS chunks; returns (store seconds, load seconds)."""
    config = get_l2_adapter_config_class("resp").from_dict(
        {"type": "resp", "host": host, "port": port, "num_workers": WORKERS})
    adapter = create_l2_adapter(config)
    try:
        keys = [ObjectKey(chunk_hash=round_no.to_bytes(16, "big") + i.to_bytes(16, "big"),
                          model_name="bench/model", kv_rank=0) for i in range(CHUNKS)]
        began = time.perf_counter()
        adapter.submit_store_task(keys, stored)
        while not adapter.pop_completed_store_tasks():
            wait(adapter.get_store_event_fd())
        store_s = time.perf_counter() - began
        began = time.perf_counter()
        task = adapter.submit_load_task(keys, loaded)
        while (result := adapter.query_load_result(task)) is None:
            wait(adapter.get_load_event_fd())
        load_s = time.perf_counter() - began
        if result.get_indices_list() != list(range(CHUNKS)):
            raise SystemExit(f"loaded only chunks {result.get_indices_list()} of {CHUNKS}")
        for a, b in zip(stored, loaded):
            if not torch.equal(a.tensor, b.tensor):
                raise SystemExit("a chunk came back with other bytes")
            b.tensor.zero_()
        adapter.delete(keys)
        return store_s, load_s
    finally:
        adapter.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    rounds = 2 if args.quick else 5
    allocator = AdHocMemoryAllocator("cpu")
    generator = torch.Generator().manual_seed(11)
    stored, loaded = [], []
    for _ in range(CHUNKS):
        obj = allocator.allocate([SHAPE], [torch.bfloat16], MemoryFormat.KV_2LTD)
        obj.tensor.copy_(torch.randn(SHAPE, generator=generator).to(torch.bfloat16))
        stored.append(obj)
        loaded.append(allocator.allocate([SHAPE], [torch.bfloat16], MemoryFormat.KV_2LTD))
    gib = CHUNKS * stored[0].tensor.numel() * 2 / (1 << 30)

    with tempfile.TemporaryDirectory(prefix="kvtier-lmcachebench-") as tmp:
        root = pathlib.Path(tmp)
        (root / "kvtierd").mkdir()
        (root / "redis").mkdir()
        daemon = Daemon(root / "kvtierd", host_bytes="1GiB", slab_bytes="64MiB")
        daemon.start()
        try:
            with redis_server(root / "redis", free_port()) as (redis_host, redis_port):
                best = {"kvtierd": [1e9, 1e9], "redis": [1e9, 1e9]}
                for r in range(rounds):
                    for name, host, port in (("kvtierd", daemon.host, daemon.port),
                                             ("redis", redis_host, redis_port)):
                        store_s, load_s = one_round(host, port, r, stored, loaded)
                        best[name] = [min(best[name][0], store_s), min(best[name][1], load_s)]
        finally:
            daemon.stop()
    for op, i in (("put", 0), ("get", 1)):
        ours, theirs = gib / best["kvtierd"][i], gib / best["redis"][i]
        figure(f"lmcache_{op}_gib_per_s_kvtierd", ours, "GiB/s")
        figure(f"lmcache_{op}_gib_per_s_redis", theirs, "GiB/s")
    for op, i in (("put", 0), ("get", 1)):
        figure(f"lmcache_{op}_ratio_to_redis", best["redis"][i] / best["kvtierd"][i], "x")


if __name__ == "__main__":
    main()
