"""What kvtier.integrations.transformers.KVTierCache accepts and refuses: token ids in either shape
forward() takes, and models and caches off the CPU (refused where they enter, not in the model's
forward pass). A 2-layer GPT-2 with random weights, fp32 on the CPU; the `meta` device stands for
a GPU (this machine has none): the checks look at the device type only.
"""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import kvtier  # noqa: E402
from kvtier.integrations.transformers import (KVTierCache, descriptor_for, forward,  # noqa: E402
                                              layer_kv)


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


def test_a_model_off_the_cpu_is_refused_where_it_enters(unix_url):
    """A model on a GPU: restore made CPU tensors (the model's forward then failed with a
    device mismatch) and save raised the client's InvalidArgumentError about a tensor the host
    path cannot read. KVTierCache handles CPU caches only: for_model refuses such a model, save
    such a cache, each saying so."""
    client = kvtier.connect(unix_url)
    model = tiny_gpt2().to("meta")
    with pytest.raises(NotImplementedError, match="CPU caches only.*the model is on meta"):
        KVTierCache.for_model(client, model)

    kv = KVTierCache.for_model(client, tiny_gpt2(), tenant_salt=b"devices")
    from transformers import DynamicCache
    cache = DynamicCache()
    shape = (1, 2, 32, 16)
    for layer in range(2):
        cache.update(torch.empty(shape, device="meta"), torch.empty(shape, device="meta"), layer)
    with pytest.raises(NotImplementedError, match="layer 0 of the cache is on meta"):
        kv.save(list(range(32)), cache)


@pytest.mark.parametrize("windowed", [{"sliding_window": 32}, {"attention_chunk_size": 32}])
def test_a_windowed_model_whose_config_names_no_layer_types_is_refused(windowed):
    """Mistral's config has a sliding window and no layer_types; transformers builds a windowed
    cache from it, which keeps only the last window of tokens. Only layer_types was checked, so
    save stored those tokens' KV under the prompt's first blocks: a later restore of the prefix
    got another span's KV, with no error."""
    cfg = transformers.MistralConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     num_key_value_heads=2, intermediate_size=128,
                                     sliding_window=None)
    descriptor_for(cfg, torch.float32)  # full attention: accepted
    for key, value in windowed.items():
        setattr(cfg, key, value)
    assert getattr(cfg, "layer_types", None) is None
    with pytest.raises(NotImplementedError, match="only full-attention layers"):
        descriptor_for(cfg, torch.float32)
