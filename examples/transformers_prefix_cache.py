#!/usr/bin/env python3
"""The classic KV-cache experiment across requests, with kvtierd keeping the cache in between.

Two requests share a long prefix (a system prompt, a document) and differ in a short question.
The first request finds nothing cached: it prefills everything, answers, and stores its KV
blocks in kvtierd. The second request restores the shared prefix from kvtierd and prefills only
its question. Printed: time to first token (TTFT) both ways, their ratio, and the block hit ratio
that kvtierd reports for the model's namespace (KVT.STATS, as `kvtier stats` shows it).

The model is a randomly initialised GPT-2 the size of GPT-2 small (or a small Llama with
grouped-query attention: --model llama), so nothing is downloaded; token ids are random.

    build/bin/kvtierd &                                   # or any running kvtierd
    pip install ./python -r python/requirements-test.txt  # kvtier, torch, transformers
    python examples/transformers_prefix_cache.py          # --url unix:///path/to/kvtierd.sock
"""
from __future__ import annotations

import argparse
import time

import torch
import transformers

import kvtier
from kvtier.integrations.transformers import KVTierCache, forward


def build_model(name: str, max_tokens: int):
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768, vocab_size=50257,
                                      n_positions=max_tokens)
        return transformers.GPT2LMHeadModel(cfg).eval()
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                                   num_hidden_layers=8, num_attention_heads=16,
                                   num_key_value_heads=4, max_position_embeddings=max_tokens)
    return transformers.LlamaForCausalLM(cfg).eval()


def request(model, kv: KVTierCache, prompt: torch.Tensor) -> tuple[float, int, int]:
    """One request: restore what kvtierd has, prefill the rest, pick the first token. Returns
    (TTFT in seconds, tokens restored, first token); stores the prompt's blocks afterwards."""
    start = time.perf_counter()
    hit = kv.restore(prompt)
    logits, cache = forward(model, prompt[hit.num_tokens:], hit.cache)
    first = int(logits[0, -1].argmax())
    ttft = time.perf_counter() - start
    kv.save(prompt, cache)  # after the first token: storing is not on the request's critical path
    return ttft, hit.num_tokens, first


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="kvtierd URL (default: the daemon's default Unix socket)")
    p.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    p.add_argument("--prefix-tokens", type=int, default=2048, help="shared prefix length")
    p.add_argument("--question-tokens", type=int, default=32, help="per-request suffix length")
    args = p.parse_args()

    total = args.prefix_tokens + args.question_tokens
    model = build_model(args.model, total)
    client = kvtier.connect(args.url)
    # A fresh salt per run, so a second run of the example starts cold too.
    kv = KVTierCache.for_model(client, model, tenant_salt=f"example-{time.time_ns()}".encode())
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(7)
    prefix = torch.randint(0, vocab, (args.prefix_tokens,), generator=g)
    question1 = torch.randint(0, vocab, (args.question_tokens,), generator=g)
    question2 = torch.randint(0, vocab, (args.question_tokens,), generator=g)
    forward(model, prefix[:64])  # warm-up, so the cold request does not pay first-call costs

    cold, restored_cold, _ = request(model, kv, torch.cat([prefix, question1]))
    warm, restored_warm, first = request(model, kv, torch.cat([prefix, question2]))

    # Check: the warm answer is the one a full prefill gives.
    logits, _ = forward(model, torch.cat([prefix, question2]))
    assert int(logits[0, -1].argmax()) == first, "restored prefix changed the answer"

    ns_stats = next(n for n in client.stats()["namespaces"] if n["ref"] == kv.namespace.ref)
    print(f"model            {args.model}, {model.num_parameters() / 1e6:.0f}M parameters, fp32, "
          f"{torch.get_num_threads()} CPU threads")
    print(f"prompt           {args.prefix_tokens} shared + {args.question_tokens} own tokens")
    print(f"cold TTFT        {cold * 1e3:9.1f} ms   ({restored_cold} tokens restored)")
    print(f"warm TTFT        {warm * 1e3:9.1f} ms   ({restored_warm} tokens restored from kvtierd)")
    print(f"speedup          {cold / warm:9.1f} x")
    print(f"block hit ratio  {ns_stats['block_hit_ratio']:9.2f}     "
          f"({ns_stats['hit_tokens']} tokens hit in {ns_stats['lookups']} lookups; kvtier stats)")


if __name__ == "__main__":
    main()
