"""End to end on real transformers models: KV blocks saved to kvtierd by one request and restored
by the next give the same output as recomputing them.

Models are randomly initialised (no weight download, no tokenizer): a GPT-2 the size of GPT-2
small (12 layers, 12 heads, 768 wide, 50,257-token vocabulary) and a small Llama with grouped-query
attention (8 query heads sharing 2 KV heads). fp32 on the CPU.

Request A: a 2,048-token prompt is prefilled and its 128 blocks of 16 tokens are stored.
Request B: shares A's first 1,536 tokens, then differs. B restores the shared prefix from kvtierd,
prefills only its last 512 tokens and generates 64 tokens greedily. Checked:
  * the restored keys and values equal A's bit for bit;
  * B's 64 tokens equal those of a run with no kvtier (full prefill of B);
  * B's logits at every step match that run within LOGIT_TOLERANCE (below).

Tolerance. Restoring changes how the prefill is cut (1,536 cached + 512 new tokens instead of
2,048 at once), so the matrix products that produce each position's activations may be blocked
differently, and fp32 sums are not associative. Each dot product here has K <= 3,072 terms; fp32's
unit roundoff is u = 6e-8, so a reordered sum moves by about sqrt(K) * u ~ 3e-6 relative (the
worst case K * u ~ 2e-4 needs every rounding error to have the same sign). Twelve layers with
residual connections and layer norms keep the relative error at that order, and the logits here are
of magnitude ~3, so a difference above 1e-4 absolute would not be reordering but a wrong position,
a wrong mask or wrong K/V bytes (those move logits by 1e-2 and more). The test also checks that the
reference run's gap between its two best tokens exceeds the tolerance at every step, so the token
comparison is meaningful rather than a coin toss between near-ties. (On the machines where this was
written, the two runs agree bit for bit; the tolerance is for other BLAS builds.)
"""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import kvtier  # noqa: E402
from kvtier.integrations.transformers import (KVTierCache, descriptor_for, forward,  # noqa: E402
                                              greedy_decode, layer_kv)

PROMPT_TOKENS = 2048
SHARED_TOKENS = 1536
NEW_TOKENS = 64
TOKENS_PER_BLOCK = 16
LOGIT_TOLERANCE = 1e-4


def gpt2_small():
    cfg = transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768, vocab_size=50257,
                                  n_positions=PROMPT_TOKENS + NEW_TOKENS)
    return transformers.GPT2LMHeadModel(cfg)


def small_llama_gqa():
    cfg = transformers.LlamaConfig(vocab_size=8000, hidden_size=512, intermediate_size=1024,
                                   num_hidden_layers=4, num_attention_heads=8,
                                   num_key_value_heads=2,
                                   max_position_embeddings=PROMPT_TOKENS + NEW_TOKENS)
    return transformers.LlamaForCausalLM(cfg)


MODELS = {"gpt2-small": gpt2_small, "llama-gqa": small_llama_gqa}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    torch.manual_seed(0)
    m = MODELS[request.param]().eval()
    return m


def prompts(vocab_size):
    g = torch.Generator().manual_seed(1234)
    a = torch.randint(0, vocab_size, (PROMPT_TOKENS,), generator=g)
    tail = torch.randint(0, vocab_size, (PROMPT_TOKENS - SHARED_TOKENS,), generator=g)
    tail[0] = (a[SHARED_TOKENS] + 1) % vocab_size  # B really differs at token 1,536
    return a, torch.cat([a[:SHARED_TOKENS], tail])


# Parametrised by data path: shared memory over the Unix socket, inline over TCP.
@pytest.fixture(params=["shm", "inline"])
def client(request, unix_url, tcp_url):
    c = kvtier.connect(unix_url if request.param == "shm" else tcp_url)
    assert c.attached == (request.param == "shm")
    yield c
    c.close()


def assert_continuation_matches_recompute(model, b, restored_cache):
    """Prefills the rest of request B on the restored cache, decodes NEW_TOKENS greedily, and
    checks tokens and logits against the same request run with no kvtier."""
    logits, cache = forward(model, b[SHARED_TOKENS:], restored_cache)
    tokens_kv, logits_kv = greedy_decode(model, logits, cache, NEW_TOKENS)

    # The same request with no kvtier.
    logits, cache = forward(model, b)
    tokens_ref, logits_ref = greedy_decode(model, logits, cache, NEW_TOKENS)

    assert tokens_kv == tokens_ref
    diff = max(float((x - y).abs().max()) for x, y in zip(logits_kv, logits_ref))
    assert diff <= LOGIT_TOLERANCE, f"logits differ by {diff}"
    gaps = [float(v[0] - v[1]) for v in (torch.topk(x, 2).values for x in logits_ref)]
    assert min(gaps) > LOGIT_TOLERANCE, "near-tie in the reference run: token check inconclusive"


def test_restore_matches_recompute(model, client, request):
    kv = KVTierCache.for_model(client, model, TOKENS_PER_BLOCK,
                               tenant_salt=request.node.name.encode())
    vocab = model.config.vocab_size
    a, b = prompts(vocab)

    # Request A: full prefill; every one of its 128 blocks goes to kvtierd.
    _, cache_a = forward(model, a)
    saved = kv.save(a, cache_a)
    assert (saved.cached_blocks, saved.written_blocks, saved.failures) == (128, 128, [])
    assert kv.save(a, cache_a).written_blocks == 0  # already cached: nothing copied again

    # Request B: restore the shared prefix.
    hit = kv.restore(b)
    assert (hit.num_tokens, hit.lookup_blocks) == (SHARED_TOKENS, SHARED_TOKENS // TOKENS_PER_BLOCK)
    num_layers = model.config.num_hidden_layers
    for layer in range(num_layers):
        for restored, original in zip(layer_kv(hit.cache, layer), layer_kv(cache_a, layer)):
            assert restored.shape == original[..., :SHARED_TOKENS, :].shape
            assert torch.equal(restored, original[..., :SHARED_TOKENS, :]), f"layer {layer}"
    assert hit.cache.get_seq_length() == SHARED_TOKENS

    assert_continuation_matches_recompute(model, b, hit.cache)


def test_other_models_never_match(model, client):
    """A namespace comes from the config, the dtype and the block size: change any and the
    blocks of another model are invisible."""
    kv = KVTierCache.for_model(client, model, TOKENS_PER_BLOCK, tenant_salt=b"never-match")
    a, _ = prompts(model.config.vocab_size)
    ids = torch.arange(3 * TOKENS_PER_BLOCK)
    _, cache = forward(model, ids)
    assert kv.save(ids, cache).cached_blocks == 3
    assert kv.cached_tokens(ids) == 3 * TOKENS_PER_BLOCK

    cfg = model.config
    other_cfg = cfg.__class__(**{**cfg.to_dict(), "vocab_size": cfg.vocab_size + 1})
    others = [
        descriptor_for(other_cfg, torch.float32, TOKENS_PER_BLOCK, tenant_salt=b"never-match"),
        descriptor_for(cfg, torch.bfloat16, TOKENS_PER_BLOCK, tenant_salt=b"never-match"),
        descriptor_for(cfg, torch.float32, 2 * TOKENS_PER_BLOCK, tenant_salt=b"never-match"),
        descriptor_for(cfg, torch.float32, TOKENS_PER_BLOCK, tenant_salt=b"other-tenant"),
    ]
    for desc in others:
        other = KVTierCache(client, desc, torch.float32)
        assert other.namespace.id != kv.namespace.id
        assert other.cached_tokens(ids) == 0
        assert other.restore(ids).cache is None


def test_short_and_partial_prompts(model, client):
    kv = KVTierCache.for_model(client, model, TOKENS_PER_BLOCK, tenant_salt=b"short")
    ids = torch.arange(2 * TOKENS_PER_BLOCK + 5)
    _, cache = forward(model, ids)
    assert kv.save(ids, cache).cached_blocks == 2  # the partial block is never stored
    # At least one token is left for the model to compute: a prompt of exactly two blocks
    # restores one.
    assert kv.restore(ids[: 2 * TOKENS_PER_BLOCK]).num_tokens == TOKENS_PER_BLOCK
    assert kv.restore(ids).num_tokens == 2 * TOKENS_PER_BLOCK
    assert kv.restore(ids[:TOKENS_PER_BLOCK]).cache is None


def test_save_refreshes_the_whole_chain(model, client, monkeypatch):
    """After its puts, save sends KVT.REFRESH of every key it saved, from the chain's head (the
    puts left the deepest blocks the most recent; docs/protocol.md)."""
    refreshed = []
    base = kvtier.Client.refresh
    monkeypatch.setattr(kvtier.Client, "refresh",
                        lambda c, ns, keys: refreshed.append(base(c, ns, keys)) or refreshed[-1])
    kv = KVTierCache.for_model(client, model, TOKENS_PER_BLOCK, tenant_salt=b"refresh")
    ids = torch.arange(3 * TOKENS_PER_BLOCK + 5)
    _, cache = forward(model, ids)
    assert kv.save(ids, cache).cached_blocks == 3
    assert refreshed == [3]
    assert kv.save(ids, cache, skip_cached=True).written_blocks == 0  # all found: nothing to put
    assert refreshed == [3]


def test_a_refused_refresh_loses_the_save_nothing(model, client, monkeypatch, caplog):
    """A daemon that refuses KVT.REFRESH (an older one, or BUSY) costs the chain its order, not
    the save: save answers what it stored, and says so once in the log."""
    def refuse(c, ns, keys):
        raise kvtier.BusyError("BUSY: refused for the test")
    monkeypatch.setattr(kvtier.Client, "refresh", refuse)
    kv = KVTierCache.for_model(client, model, TOKENS_PER_BLOCK, tenant_salt=b"refused-refresh")
    ids = torch.arange(2 * TOKENS_PER_BLOCK + 3)
    _, cache = forward(model, ids)
    with caplog.at_level("WARNING", logger="kvtier.transformers"):
        assert kv.save(ids, cache).cached_blocks == 2
        assert kv.save(ids, cache).cached_blocks == 2
    assert len([r for r in caplog.records if "did not refresh" in r.getMessage()]) == 1
    assert kv.restore(ids).num_tokens == 2 * TOKENS_PER_BLOCK
