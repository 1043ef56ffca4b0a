#!/usr/bin/env python3
"""Benchmarks of the Python package against kvtierd, each against a baseline in the same run.

Prints one line per figure, "NAME VALUE UNIT" (bench/README.md explains them):

  py_get_ratio_to_cpp       Python get throughput of 2 MiB blocks (kvtier.Client.get, shared
                            memory) over the C++ client's (`kvtier bench --path shm`), same
                            daemon, same block count and batch, alternating runs; median of each.
  py_get_gib_per_s, cpp_get_gib_per_s   the medians behind the ratio.
  ttft_restore_speedup_4k   time to first token of a 4,096-token prompt on a randomly initialised
                            GPT-2-small-size model (fp32, CPU): full prefill over restore of the
                            first 4,080 tokens from kvtierd plus prefill of the last 16.
  ttft_restore_ms_4k        the restored (warm) time to first token, median of its runs.
  ttft_recompute_ms_4k      the full-prefill time to first token.

Starts its own kvtierd (binaries from KVTIER_BIN_DIR, default build/bin) in a temporary directory
and stops it on exit. Needs the kvtier package and, for the TTFT figures, torch and transformers
(bench/run.sh installs them into build/venv-py). --quick: fewer repetitions.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import kvtier  # noqa: E402
from kvtierd_process import BIN_DIR, Daemon  # noqa: E402

BLOCK_BYTES = 2 << 20
GET_COUNT = 256   # blocks per run: 512 MiB
GET_BATCH = 16    # blocks per call


def figure(name: str, value: float, unit: str) -> None:
    print(f"{name} {value:.4g} {unit}", flush=True)


def cpp_get_gib_per_s(url: str) -> float:
    out = subprocess.run(
        [str(BIN_DIR / "kvtier"), "bench", "--url", url, "--block-bytes", str(BLOCK_BYTES),
         "--path", "shm", "--count", str(GET_COUNT), "--batch", str(GET_BATCH), "--json"],
        check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    if result["get"]["blocks_failed"]:
        raise RuntimeError(f"kvtier bench: {result['get']['blocks_failed']} gets failed")
    return result["get"]["gib_per_s"]


def py_get_gib_per_s(client: kvtier.Client, run: int) -> float:
    """The Python twin of `kvtier bench`: put GET_COUNT blocks, then get them back in batches of
    GET_BATCH into one reused (pre-faulted) buffer; drop the namespace afterwards."""
    desc = kvtier.NamespaceDescriptor(model_id="kvtier-py-bench", kv_dtype="int8", num_layers=1,
                                      num_kv_heads=1, head_dim=1, tokens_per_block=16,
                                      layout_tag="bench", tenant_salt=f"run-{run}".encode())
    ns = client.register_namespace(desc, BLOCK_BYTES)
    keys = kvtier.fold_foreign_keys(ns, [i.to_bytes(8, "little") for i in range(GET_COUNT)])
    buf = np.full((GET_BATCH, BLOCK_BYTES), run % 251, dtype=np.uint8)
    for i in range(0, GET_COUNT, GET_BATCH):
        kvtier.raise_for_statuses(client.put(ns, keys[i:i + GET_BATCH], buf))
    served = 0
    start = time.perf_counter()
    for i in range(0, GET_COUNT, GET_BATCH):
        served += client.get(ns, keys[i:i + GET_BATCH], buf)
    elapsed = time.perf_counter() - start
    client.drop(ns)
    if served != GET_COUNT:
        raise RuntimeError(f"python get served {served} of {GET_COUNT} blocks")
    return GET_COUNT * BLOCK_BYTES / elapsed / (1 << 30)


def bench_get(daemon: Daemon, reps: int) -> None:
    url = "unix://" + daemon.unix
    client = kvtier.connect(url)
    py_get_gib_per_s(client, -1)  # warm-up: faults the arena into this process's mapping
    cpp, py = [], []
    for rep in range(reps):  # alternate, so drift in the machine's load hits both alike
        cpp.append(cpp_get_gib_per_s(url))
        py.append(py_get_gib_per_s(client, rep))
    client.close()
    cpp_m, py_m = statistics.median(cpp), statistics.median(py)
    figure("py_get_ratio_to_cpp", py_m / cpp_m, "ratio")
    figure("py_get_gib_per_s", py_m, "GiB/s")
    figure("cpp_get_gib_per_s", cpp_m, "GiB/s")


def bench_ttft(daemon: Daemon, reps: int) -> None:
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"python_bench: no TTFT figures: {e}", file=sys.stderr)
        return
    from kvtier.integrations.transformers import KVTierCache, forward

    prompt_tokens, restore_tokens = 4096, 4080
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768, vocab_size=50257,
                                  n_positions=prompt_tokens)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    prompt = torch.randint(0, cfg.vocab_size, (prompt_tokens,),
                           generator=torch.Generator().manual_seed(1))
    kv = KVTierCache.for_model(kvtier.connect("unix://" + daemon.unix), model)
    forward(model, prompt[:256])  # warm-up: first-call allocations, kernels

    start = time.perf_counter()
    logits, cache = forward(model, prompt)
    first_cold = int(logits[0, -1].argmax())
    cold_s = time.perf_counter() - start
    saved = kv.save(prompt, cache)
    if saved.cached_blocks * kv.tokens_per_block < restore_tokens:
        raise RuntimeError(f"only {saved.cached_blocks} blocks stored: {saved.failures[:1]}")
    del cache

    warm = []
    for _ in range(reps):
        start = time.perf_counter()
        hit = kv.restore(prompt)
        logits, _ = forward(model, prompt[hit.num_tokens:], hit.cache)
        first_warm = int(logits[0, -1].argmax())
        warm.append(time.perf_counter() - start)
        if hit.num_tokens != restore_tokens or first_warm != first_cold:
            raise RuntimeError(f"restored {hit.num_tokens} tokens, first token {first_warm} "
                               f"vs {first_cold} recomputed")
        del hit, logits
    warm_s = statistics.median(warm)
    figure("ttft_restore_speedup_4k", cold_s / warm_s, "ratio")
    figure("ttft_restore_ms_4k", warm_s * 1e3, "ms")
    figure("ttft_recompute_ms_4k", cold_s * 1e3, "ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvtier-pybench-") as tmp:
        # Room for the 512 MiB get working set and the 287 MiB of the 4K prompt, evicting nothing.
        daemon = Daemon(tmp, host_bytes="2GiB", slab_bytes="64MiB")
        daemon.start()
        try:
            bench_get(daemon, 3 if args.quick else 7)
            bench_ttft(daemon, 3 if args.quick else 5)
        finally:
            rc = daemon.stop()
        if rc != 0:
            raise SystemExit(f"kvtierd exited with status {rc}:\n{daemon.log()}")


if __name__ == "__main__":
    main()
