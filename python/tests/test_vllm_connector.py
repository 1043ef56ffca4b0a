"""kvtier.integrations.vllm.KvtierConnector against vLLM's real connector base class and KV cache
config types, with CPU tensors standing in for the paged GPU cache and simple stand-ins for the
scheduler's Request and SchedulerOutput objects (a real vLLM engine needs a GPU here).

Skipped unless vLLM is installed (not in CI: it brings several GB of its own torch and CUDA
packages); run in a venv with `pip install vllm==0.33.0 pytest` and the kvtier package.
"""
import os
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from vllm.config import KVTransferConfig  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,  # noqa: E402
                                        KVCacheGroupSpec)

from kvtier.integrations.vllm import KvtierConnector  # noqa: E402

BLOCK = 16
NUM_BLOCKS = 32
LAYERS = ["model.layers.0.attn", "model.layers.1.attn", "model.layers.2.attn"]


def configs(url, layout, dtype=torch.float16, block=BLOCK, salt="t"):
    spec = FullAttentionSpec(block_size=block, num_kv_heads=2, head_size=8, dtype=dtype)
    kv_cache_config = KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[],
                                    kv_cache_groups=[KVCacheGroupSpec(LAYERS, spec)])
    transfer = KVTransferConfig(kv_connector="KvtierConnector", kv_role="kv_both",
                                kv_connector_module_path="kvtier.integrations.vllm",
                                kv_connector_extra_config={"url": url, "tenant_salt": salt})
    vllm_config = SimpleNamespace(
        kv_transfer_config=transfer,
        cache_config=SimpleNamespace(block_size=block, kv_cache_layout=layout),
        model_config=SimpleNamespace(model="test/tiny", revision=None),
        parallel_config=SimpleNamespace(rank=0, tensor_parallel_size=1))
    return vllm_config, kv_cache_config


def caches(layout):
    g = torch.Generator().manual_seed(5)
    if layout == "flash_attn":  # (2, blocks, block_size, heads, head): K and V regions apart
        shape = (2, NUM_BLOCKS, BLOCK, 2, 8)
    else:                       # (blocks, 2, block_size, heads, head): one region per block
        shape = (NUM_BLOCKS, 2, BLOCK, 2, 8)
    return {name: torch.randn(shape, generator=g).to(torch.float16) for name in LAYERS}


def page(cache, layout, block_id):
    return cache[:, block_id] if layout == "flash_attn" else cache[block_id]


def request(req_id, hashes, num_tokens):
    return SimpleNamespace(request_id=req_id, block_hashes=hashes, num_prompt_tokens=num_tokens)


def output(new_reqs=(), cached=None, scheduled=None):
    cached = cached or SimpleNamespace(req_ids=[], new_block_ids=[], num_computed_tokens=[],
                                       resumed_req_ids=set())
    return SimpleNamespace(scheduled_new_reqs=list(new_reqs), scheduled_cached_reqs=cached,
                           num_scheduled_tokens=scheduled or {})


def blocks(ids):
    return SimpleNamespace(get_block_ids=lambda: (list(ids),))


def step(worker, meta):
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    worker.wait_for_save()
    worker.clear_connector_metadata()


@pytest.mark.parametrize("layout", ["flash_attn", "flashinfer"])
def test_store_then_load_across_requests(unix_url, layout):
    vllm_config, kv_cache_config = configs(unix_url, layout)
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    kv = caches(layout)
    worker.register_kv_caches(kv)

    hashes_a = [os.urandom(32) for _ in range(5)]
    a = request("A", hashes_a, 5 * BLOCK + 3)
    assert sched.get_num_new_matched_tokens(a, 0) == (0, False)
    a_ids = [3, 7, 1, 9, 4, 12]
    sched.update_state_after_alloc(a, blocks(a_ids), 0)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="A", block_ids=(a_ids,), num_computed_tokens=0)],
        scheduled={"A": 5 * BLOCK + 3}))
    assert meta.loads == [] and [t.block_ids for t in meta.stores] == [a_ids[:5]]
    step(worker, meta)
    assert sched.request_finished(a, a_ids) == (False, None)

    # B shares A's first three blocks; vLLM's own prefix cache already holds the first one.
    b = request("B", hashes_a[:3] + [os.urandom(32)], 4 * BLOCK + 1)
    assert sched.get_num_new_matched_tokens(b, BLOCK) == (2 * BLOCK, False)
    b_ids = [20, 21, 22, 23, 24]
    sched.update_state_after_alloc(b, blocks(b_ids), 2 * BLOCK)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="B", block_ids=(b_ids,), num_computed_tokens=3 * BLOCK)],
        scheduled={"B": BLOCK + 1}))
    assert [t.block_ids for t in meta.loads] == [[21, 22]]
    assert [t.block_ids for t in meta.stores] == [[23]]  # B's own fourth block
    step(worker, meta)
    for cache in kv.values():
        assert torch.equal(page(cache, layout, 21), page(cache, layout, 7))
        assert torch.equal(page(cache, layout, 22), page(cache, layout, 1))
    assert worker.get_block_ids_with_load_errors() == set()

    # A decode step that fills B's fifth block stores it too.
    meta = sched.build_connector_meta(output(cached=SimpleNamespace(
        req_ids=["B"], new_block_ids=[None], num_computed_tokens=[4 * BLOCK + 1],
        resumed_req_ids=set()), scheduled={"B": 1}))
    assert meta.stores == []  # 66 tokens: still four full blocks (B has only four hashes)

    again = request("B2", b.block_hashes, 4 * BLOCK + 1)
    assert sched.get_num_new_matched_tokens(again, 0) == (4 * BLOCK, False)
    for conn in (sched, worker):
        conn.shutdown()


def test_other_configurations_never_match(unix_url):
    vllm_config, kv_cache_config = configs(unix_url, "flashinfer", salt="iso")
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches("flashinfer"))
    hashes = [os.urandom(32) for _ in range(2)]
    r = request("R", hashes, 2 * BLOCK + 1)
    sched.get_num_new_matched_tokens(r, 0)
    sched.update_state_after_alloc(r, blocks([0, 1, 2]), 0)
    step(worker, sched.build_connector_meta(output(
        [SimpleNamespace(req_id="R", block_ids=([0, 1, 2],), num_computed_tokens=0)],
        scheduled={"R": 2 * BLOCK + 1})))
    assert sched.get_num_new_matched_tokens(request("R2", hashes, 2 * BLOCK + 1), 0)[0] == 2 * BLOCK
    for variant in (configs(unix_url, "flashinfer", dtype=torch.bfloat16, salt="iso"),
                    configs(unix_url, "flash_attn", salt="iso"),
                    configs(unix_url, "flashinfer", salt="other")):
        other = KvtierConnector(*variant[:1], KVConnectorRole.SCHEDULER, variant[1])
        assert other.get_num_new_matched_tokens(request("X", hashes, 2 * BLOCK + 1), 0) == (0, False)
