"""What kvtier.integrations.transformers.KVTierCache accepts and refuses: token ids in either shape
forward() takes. A 2-layer GPT-2 with random weights, fp32 on the CPU.
"""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import kvtier  # noqa: E402
from kvtier.integrations.transformers import KVTierCache, forward, layer_kv  # noqa: E402


def tiny_gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100)
    return transformers.GPT2LMHeadModel(cfg).eval()


def test_restore_takes_token_ids_shaped_as_forward_takes_them(unix_url):
    """save and forward take a [1, n] batch of token ids; restore took its length as 1 and
    raised InvalidArgumentError ("got shape (0, 40)")."""
    model = tiny_gpt2()
    kv = KVTierCache.for_model(kvtier.connect(unix_url), model, tenant_salt=b"rows")
    ids = torch.randint(0, 100, (1, 40), generator=torch.Generator().manual_seed(3))
    _, cache = forward(model, ids)
    assert kv.save(ids, cache).cached_blocks == 2
    for tokens in (ids, ids[0], ids.tolist(), ids[0].tolist()):
        hit = kv.restore(tokens)
        assert (hit.num_tokens, hit.lookup_blocks) == (32, 2)
        assert torch.equal(layer_kv(hit.cache, 1)[0], layer_kv(cache, 1)[0][..., :32, :])
    with pytest.raises(kvtier.InvalidArgumentError, match=r"one sequence .* shape \(2, 40\)"):
        kv.restore(torch.cat([ids, ids]))
