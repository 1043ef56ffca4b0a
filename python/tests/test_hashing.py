"""Hashing through the bindings: the golden vectors of docs/hashing.md (the same ones
hashing/hashing_test.cc checks), so Python and C++ agree byte for byte. No daemon needed."""
import numpy as np
import pytest

import kvtier

GOLDEN_ENCODING = (
    "6b76746965722d6e730108000000010000000000000002200000006d6574612d6c6c616d612f4c6c616d612d332e"
    "312d38422d496e73747275637403040000006d61696e0404000000626631360508000000200000000000000006080000"
    "00080000000000000007080000008000000000000000080800000010000000000000000908000000766c6c6d5f6e6864"
    "0a0800000000000000000000000b0800000001000000000000000c00000000")
GOLDEN_NAMESPACE = "ad88b852fe217fcf154e1f2b9ae7f775"
GOLDEN_SALTED_NAMESPACE = "c062b7c15e11d7217c3a20c2a7fd3f2e"
GOLDEN_KEYS = ["cacef79069860d4b0ccb38bfbf9a9aa2", "f03b24258c81ca27ae7237c1a81cf2b6",
               "c234b4e14887e8b70e64b39559ffe99a"]
GOLDEN_EXTRA_KEY = "c7827d875d1f2549e211f643fbc498eb"
GOLDEN_FOREIGN_KEYS = ["90795d9e6e0e94195a7f25d120ba1c27", "eba4e5ef417baf81e8e8e4c43c3c5476"]


def golden_descriptor(**overrides):
    fields = dict(model_id="meta-llama/Llama-3.1-8B-Instruct", model_revision="main",
                  kv_dtype="bf16", num_layers=32, num_kv_heads=8, head_dim=128,
                  tokens_per_block=16, layout_tag="vllm_nhd")
    fields.update(overrides)
    return kvtier.NamespaceDescriptor(**fields)


GOLDEN_TOKENS = [(i * 2654435761) % 2**32 for i in range(50)]


def test_namespace_encoding_and_id():
    d = golden_descriptor()
    assert d.canonical_encoding().hex() == GOLDEN_ENCODING
    assert len(d.canonical_encoding()) == 173
    assert d.namespace_id().hex() == GOLDEN_NAMESPACE
    assert kvtier.namespace_id(d).hex() == GOLDEN_NAMESPACE
    assert golden_descriptor(tenant_salt=b"tenant-a").namespace_id().hex() == GOLDEN_SALTED_NAMESPACE
    assert d.block_bytes() == 2 * 32 * 8 * 128 * 16 * 2


@pytest.mark.parametrize("tokens", [
    GOLDEN_TOKENS,
    np.array(GOLDEN_TOKENS, dtype=np.uint32),
    np.array(GOLDEN_TOKENS, dtype=np.int64),
    tuple(GOLDEN_TOKENS),
])
def test_block_keys(tokens):
    keys = kvtier.chain_keys(bytes.fromhex(GOLDEN_NAMESPACE), tokens, 16)
    assert [k.hex() for k in keys] == GOLDEN_KEYS  # two trailing tokens get no key


def test_block_keys_from_torch_tensor():
    torch = pytest.importorskip("torch")
    keys = kvtier.chain_keys(bytes.fromhex(GOLDEN_NAMESPACE), torch.tensor(GOLDEN_TOKENS), 16)
    assert [k.hex() for k in keys] == GOLDEN_KEYS


def test_hash_tokens_uses_the_namespace_block_size():
    ns = kvtier.Namespace(bytes.fromhex(GOLDEN_NAMESPACE), block_bytes=1, tokens_per_block=16)
    assert [k.hex() for k in kvtier.hash_tokens(ns, GOLDEN_TOKENS)] == GOLDEN_KEYS
    assert ns.id_hex == GOLDEN_NAMESPACE


def test_namespace_ref_is_the_daemons():
    # The same value as hashing/namespace_descriptor_test.cc pins: statistics name namespaces so.
    ref = kvtier.namespace_ref("0123456789abcdeffedcba9876543210")
    assert ref == "6881ad4c8c3ccd57"
    assert kvtier.namespace_ref(bytes.fromhex("0123456789abcdeffedcba9876543210")) == ref
    ns = kvtier.Namespace(bytes.fromhex(GOLDEN_NAMESPACE), block_bytes=1, tokens_per_block=16)
    assert ns.ref == kvtier.namespace_ref(ns) == kvtier.namespace_ref(GOLDEN_NAMESPACE)
    assert ns.ref not in GOLDEN_NAMESPACE


def test_extra_and_foreign_keys():
    ns = bytes.fromhex(GOLDEN_NAMESPACE)
    assert kvtier.chain_keys(ns, GOLDEN_TOKENS[:16], 16, extras=[b"lora:7"])[0].hex() == GOLDEN_EXTRA_KEY
    folded = kvtier.fold_foreign_keys(ns, [bytes(range(0, 32)), bytes(range(32, 64))])
    assert [k.hex() for k in folded] == GOLDEN_FOREIGN_KEYS


def test_prefix_keys_are_a_prefix_of_the_chain():
    ns = bytes.fromhex(GOLDEN_NAMESPACE)
    assert kvtier.chain_keys(ns, GOLDEN_TOKENS[:32], 16) == kvtier.chain_keys(ns, GOLDEN_TOKENS, 16)[:2]
    assert kvtier.chain_keys(ns, GOLDEN_TOKENS[:15], 16) == []


@pytest.mark.parametrize("overrides, field", [
    (dict(model_id=""), "model_id"),
    (dict(kv_dtype="BF16"), "kv_dtype"),
    (dict(num_layers=0), "num_layers"),
    (dict(head_dim=5000), "head_dim"),
    (dict(layout_tag=""), "layout_tag"),
    (dict(tp_rank=1, tp_size=1), "tp_rank"),
])
def test_invalid_descriptors_name_the_field(overrides, field):
    d = golden_descriptor(**overrides)
    with pytest.raises(kvtier.InvalidArgumentError, match=field) as info:
        d.validate()
    assert isinstance(info.value, ValueError) and info.value.code == "INVALID_ARGUMENT"
    with pytest.raises(kvtier.InvalidArgumentError):
        d.namespace_id()


@pytest.mark.parametrize("tokens, message", [
    ([-1, 2], "unsigned 32-bit"),
    ([2**32], "unsigned 32-bit"),
    ([1.5], "integer"),
    ([[1, 2], [3, 4]], "1-D"),
])
def test_bad_tokens(tokens, message):
    with pytest.raises(kvtier.InvalidArgumentError, match=message):
        kvtier.chain_keys(bytes.fromhex(GOLDEN_NAMESPACE), tokens, 16)


def test_bad_namespace_id():
    with pytest.raises(kvtier.InvalidArgumentError, match="16"):
        kvtier.chain_keys(b"short", GOLDEN_TOKENS, 16)
    with pytest.raises(kvtier.InvalidArgumentError, match="tokens_per_block"):
        kvtier.chain_keys(bytes.fromhex(GOLDEN_NAMESPACE), GOLDEN_TOKENS, 0)


def test_an_element_not_bytes_like_is_named_by_its_argument():
    """fold_foreign_keys shared chain_keys's check of its byte strings, which named the element
    extras[i] whichever argument it was in."""
    ns = bytes.fromhex(GOLDEN_NAMESPACE)
    with pytest.raises(kvtier.InvalidArgumentError, match=r"engine_hashes\[1\]: not bytes-like"):
        kvtier.fold_foreign_keys(ns, [b"h" * 32, 123])
    with pytest.raises(kvtier.InvalidArgumentError, match=r"extras\[0\]: not bytes-like"):
        kvtier.chain_keys(ns, GOLDEN_TOKENS[:32], 16, extras=[7, b"x"])


def test_descriptor_fields_round_trip():
    d = golden_descriptor(tenant_salt=b"\x00\xffsalt")
    assert d.tenant_salt == b"\x00\xffsalt"
    d.num_layers = 2
    assert d.num_layers == 2 and d.kv_dtype == "bf16"
    assert kvtier.bytes_per_element("fp32") == 4 and kvtier.bytes_per_element("x") == 0
