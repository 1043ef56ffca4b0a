"""End to end through a daemon restart: KV blocks that request A saved are served to request B
from the NVMe tier of a new kvtierd process, and give the same output as recomputing them.

The model and the two requests are those of test_transformers_e2e.py (GPT-2-small-size, random
weights, fp32 on the CPU; A is 2,048 tokens, B shares its first 1,536). The daemon has an NVMe tier
with write-through, so each of A's puts is on NVMe before it is acknowledged. The daemon is then
stopped with SIGTERM and a new one started on the same data directory; it adopts the blocks on NVMe
and holds nothing in memory. B restores the shared prefix from it. Checked:
  * the new daemon adopted A's 128 blocks, all on NVMe, none in host memory;
  * before the restore, the lookup of B's prefix finds its 96 blocks on tier "nvme";
  * the restore reads them from the NVMe device and promotes them to host memory (promote_on_hit);
  * the restored keys and values equal A's bit for bit;
  * B's 64 generated tokens equal those of a run with no kvtier, and its logits are within
    test_transformers_e2e.LOGIT_TOLERANCE (where that tolerance comes from is explained there).
"""
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import kvtier  # noqa: E402
from kvtier.integrations.transformers import KVTierCache, forward, layer_kv  # noqa: E402
# conftest.py puts tests/integration (kvtierd_process) on sys.path.
from kvtierd_process import BIN_DIR, Daemon  # noqa: E402
from test_transformers_e2e import (PROMPT_TOKENS, SHARED_TOKENS, TOKENS_PER_BLOCK,  # noqa: E402
                                   assert_continuation_matches_recompute, gpt2_small, prompts)

A_BLOCKS = PROMPT_TOKENS // TOKENS_PER_BLOCK  # 128
SHARED_BLOCKS = SHARED_TOKENS // TOKENS_PER_BLOCK  # 96

# GPT-2-small-size blocks are 1.125 MiB (12 layers x K,V x 768 x 16 tokens x 4 bytes): A's 128
# fit both tiers with room to spare, so nothing is evicted or demoted during the test.
NVME_CONFIG = """\
nvme:
  write_through: true
  promote_on_hit: true
"""


def tier_stats(stats, name):
    return next(t for t in stats["tiers"] if t["tier"] == name)


def namespace_stats(stats, ns):
    return next(n for n in stats["namespaces"] if n["ref"] == ns.ref)


@pytest.fixture
def daemon(tmp_path):
    if not (BIN_DIR / "kvtierd").exists():
        pytest.skip(f"no kvtierd in {BIN_DIR} (set KVTIER_BIN_DIR)")
    d = Daemon(tmp_path, host_bytes="1GiB", slab_bytes="64MiB", nvme_bytes="512MiB",
               extra_config=NVME_CONFIG)
    d.start()
    try:
        yield d
    finally:
        rc = d.stop()
        assert rc == 0, f"kvtierd did not stop cleanly (status {rc}):\n{d.log()}"


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test. Single-token decode steps are short, and on a 2-core machine
    shared with other jobs two OpenMP threads waiting for each other made them about four times
    slower than one. The two runs compared use the same setting."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def restart(daemon):
    """SIGTERM, a clean exit, and a new process on the same data directory."""
    rc = daemon.stop()
    assert rc == 0, f"kvtierd did not stop cleanly (status {rc}):\n{daemon.log()}"
    assert not os.path.exists(daemon.unix), "kvtierd left its socket file behind"
    old_pid = daemon.proc.pid
    daemon.start()
    assert daemon.proc.pid != old_pid


def test_restore_from_nvme_after_restart_matches_recompute(daemon, one_torch_thread):
    torch.manual_seed(0)
    model = gpt2_small().eval()
    a, b = prompts(model.config.vocab_size)
    salt = b"restart"

    # Request A, first daemon: full prefill; its 128 blocks are written through to NVMe.
    _, cache_a = forward(model, a)
    with kvtier.connect("unix://" + daemon.unix) as client:
        assert client.attached
        kv = KVTierCache.for_model(client, model, TOKENS_PER_BLOCK, tenant_salt=salt)
        saved = kv.save(a, cache_a)
        assert (saved.cached_blocks, saved.written_blocks) == (A_BLOCKS, A_BLOCKS)
        assert saved.failures == []
        totals = client.stats()["totals"]
        assert (totals["write_throughs"], totals["write_through_failures"]) == (A_BLOCKS, 0)

    restart(daemon)

    # Request B, second daemon: A's blocks are on NVMe only.
    with kvtier.connect("unix://" + daemon.unix) as client:
        assert client.attached
        kv = KVTierCache.for_model(client, model, TOKENS_PER_BLOCK, tenant_salt=salt)
        stats = client.stats()
        assert stats["totals"]["adopted_blocks"] == A_BLOCKS
        assert tier_stats(stats, "nvme")["blocks"] == A_BLOCKS
        assert tier_stats(stats, "host")["blocks"] == 0
        nvme_before = tier_stats(stats, "nvme")

        found = client.lookup(kv.namespace, kv.keys(b))
        assert found.prefix == SHARED_BLOCKS
        assert found.tiers == ["nvme"] * SHARED_BLOCKS

        hit = kv.restore(b)
        assert (hit.num_tokens, hit.lookup_blocks) == (SHARED_TOKENS, SHARED_BLOCKS)

        stats = client.stats()
        nvme_after = tier_stats(stats, "nvme")
        assert namespace_stats(stats, kv.namespace)["hit_blocks"]["host"] == 0
        assert namespace_stats(stats, kv.namespace)["hit_blocks"]["nvme"] >= SHARED_BLOCKS
        reads = nvme_after["device"]["reads"] - nvme_before["device"]["reads"]
        assert reads >= SHARED_BLOCKS, f"{reads} NVMe reads for {SHARED_BLOCKS} blocks"
        assert nvme_after["promotions"] - nvme_before["promotions"] == SHARED_BLOCKS
        assert nvme_after["device"]["checksum_failures"] == 0
        # Promoted: the shared prefix is now in host memory, the rest of A still on NVMe.
        assert client.lookup(kv.namespace, kv.keys(a)).tiers == (
            ["host"] * SHARED_BLOCKS + ["nvme"] * (A_BLOCKS - SHARED_BLOCKS))

    for layer in range(model.config.num_hidden_layers):
        for restored, original in zip(layer_kv(hit.cache, layer), layer_kv(cache_a, layer)):
            assert restored.shape == original[..., :SHARED_TOKENS, :].shape
            assert torch.equal(restored, original[..., :SHARED_TOKENS, :]), f"layer {layer}"
    assert hit.cache.get_seq_length() == SHARED_TOKENS
    del cache_a

    assert_continuation_matches_recompute(model, b, hit.cache)
