// The fixture shared by the store's tests: fake tiers, a fake clock, a registered namespace, and
// the accounting identity checked after every test.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "daemon/store/store.h"
#include "tests/fakes/fake_tier.h"
#include "tiers/gpu/fake_gpu_tier.h"

namespace kvtier::store::testing {

using kvtier::testing::FakeTier;

inline constexpr uint64_t kBlock = 4096;
inline const NamespaceId kNs{{0xAA, 0x01}};
inline const NamespaceId kOtherNs{{0xBB, 0x02}};

inline BlockKey Key(uint64_t n) { return BlockKey{{0x1234, n}}; }

inline std::vector<std::byte> Payload(uint64_t seed, uint64_t size = kBlock) {
  std::vector<std::byte> v(size);
  for (uint64_t i = 0; i < size; ++i) v[i] = static_cast<std::byte>((seed * 131 + i * 7) & 0xff);
  return v;
}

class StoreTest : public ::testing::Test {
 protected:
  // `tier_blocks` blocks of room in each tier, hottest first; with `gpu_blocks`, a FakeGpuTier of
  // that many blocks above them.
  void Build(std::vector<uint64_t> tier_blocks, bool last_addressable = true,
             StoreOptions options = {}, uint64_t gpu_blocks = 0) {
    std::vector<tiers::Tier*> list;
    if (gpu_blocks > 0) {
      auto gpu = tiers::FakeGpuTier::Create({.fake = true,
                                             .capacity_bytes = gpu_blocks * kBlock,
                                             .slab_bytes = gpu_blocks * kBlock,
                                             .alignment = kBlock});
      ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
      gpu_ = std::move(gpu).value();
      list.push_back(gpu_.get());
    }
    TierId ids[] = {TierId::kHost, TierId::kNvme};
    for (size_t i = 0; i < tier_blocks.size(); ++i) {
      bool addressable = i + 1 < tier_blocks.size() || last_addressable;
      tiers_.push_back(std::make_unique<FakeTier>(ids[i], tier_blocks[i] * kBlock, addressable));
      list.push_back(tiers_.back().get());
    }
    options.lease_timeout_us = 1'000'000;
    options.reservation_timeout_us = 2'000'000;
    auto store = Store::Create(options, list, clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    ASSERT_TRUE(store_->RegisterNamespace({kNs, /*tokens_per_block=*/16, kBlock, "test"}).ok());
  }

  // The accounting identity, checked after every test: every acknowledged put is present, was
  // evicted, or was removed; and the tiers hold exactly the blocks the index knows.
  void TearDown() override {
    if (!store_) return;
    StoreStats s = store_->Stats();
    EXPECT_EQ(s.committed_puts + s.adopted_blocks,
              s.blocks_present + s.evicted_blocks + s.removed_blocks);
    EXPECT_EQ(store_->PresentBlocks(), s.blocks_present);
    uint64_t tier_blocks = 0;
    for (const auto& t : s.tiers) tier_blocks += t.space.block_count;
    EXPECT_EQ(tier_blocks,
              s.blocks_present + s.blocks_writing + s.blocks_quarantined + s.blocks_shadowed);
    for (const auto& t : tiers_) EXPECT_EQ(t->bad_frees(), 0u);
    if (gpu_) {
      EXPECT_EQ(gpu_->invalid_free_count(), 0u);
    }
  }

  Status PutBlock(uint64_t n, const NamespaceId& ns = kNs) {
    return store_->Put(ns, Key(n), Payload(n));
  }

  // The tier block n lies in, or TierId::kGpu when it is absent (for tests with no GPU tier).
  TierId TierOf(uint64_t n) {
    std::vector<BlockKey> keys{Key(n)};
    index::LookupResult r = store_->Lookup(kNs, keys);
    return r.ready_prefix == 1 ? r.tiers[0] : TierId::kGpu;
  }

  const TierStatsSnapshot& TierStatsOf(const StoreStats& s, TierId id) {
    for (const auto& t : s.tiers) {
      if (t.tier == id) return t;
    }
    ADD_FAILURE() << "no tier " << TierName(id);
    return s.tiers.front();
  }

  bool Cached(uint64_t n) {
    std::vector<BlockKey> keys{Key(n)};
    return store_->Lookup(kNs, keys).ready_prefix == 1;
  }

  FakeClock clock_;
  std::unique_ptr<tiers::FakeGpuTier> gpu_;  // only with Build's gpu_blocks
  std::vector<std::unique_ptr<FakeTier>> tiers_;
  std::unique_ptr<Store> store_;
};

}  // namespace kvtier::store::testing
