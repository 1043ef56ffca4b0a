#include <gtest/gtest.h>

#include <random>
#include <set>
#include <thread>

#include "daemon/index/block_index.h"

// Every eviction policy behind a BlockIndex shared by several threads, as the daemon's network
// and mover threads share it: lookups that touch, inserts, leases, and evictions at once. The
// outcome of a run depends on the interleaving, so the test checks what must hold for any of them
// (each block tracked by its tier's policy exactly when it is ready and was not picked, leased
// blocks never picked); it is labelled "concurrency" so that the TSan build runs it too.

namespace kvtier::index {
namespace {

BlockKey Key(uint64_t n) { return BlockKey{{n * 0x9E3779B97F4A7C15ULL, n}}; }

BlockMeta Meta() {
  BlockMeta meta;
  meta.tier = TierId::kHost;
  meta.extent = {0, 4096};
  return meta;
}

class BlockIndexPoliciesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BlockIndexPoliciesTest, ConcurrentUseKeepsIndexAndPolicyInAgreement) {
  constexpr size_t kThreads = 4;
  constexpr size_t kCapacity = 200;
  constexpr uint64_t kChains = 64;
  constexpr uint64_t kChainBlocks = 16;
  auto created = BlockIndex::Create(
      {.shard_count = 8, .policy = GetParam(), .capacity_hint_blocks = kCapacity});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  BlockIndex& index = **created;

  std::vector<std::thread> threads;
  std::vector<size_t> leased_picked(kThreads, 0);
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      std::vector<BlockKey> chain(kChainBlocks);
      for (int step = 0; step < 3000; ++step) {
        // A request: look up a chain's prefix (touching it), then put the rest.
        const uint64_t c = rng() % kChains;
        const size_t length = 1 + rng() % kChainBlocks;
        for (size_t i = 0; i < length; ++i) chain[i] = Key(c * kChainBlocks + i);
        const LookupResult hit = index.Lookup({chain.data(), length}, /*touch=*/true);
        for (size_t i = length; i-- > hit.ready_prefix;) (void)index.InsertReady(chain[i], Meta());
        // Now and then a reader leases a block for a while; an evictor must skip it.
        if (step % 7 == 0) {
          (void)index.Update(chain[0], [](BlockMeta& m) {
            ++m.lease_count;
            return Status::Ok();
          });
        }
        while (index.TrackedBlocks(TierId::kHost) > kCapacity) {
          auto victim = index.PickVictim(TierId::kHost, 0);
          if (!victim) break;
          if (victim->second.lease_count > 0) ++leased_picked[t];
          (void)index.Erase(victim->first);
        }
        if (step % 7 == 0) {
          (void)index.Update(chain[0], [](BlockMeta& m) {
            if (m.lease_count > 0) --m.lease_count;
            return Status::Ok();
          });
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  for (size_t t = 0; t < kThreads; ++t) EXPECT_EQ(leased_picked[t], 0u) << "thread " << t;
  // Every entry left is ready, unleased and tracked: popping them all returns each exactly once.
  std::set<BlockKey> entries;
  index.ForEach([&](const BlockKey& key, const BlockMeta& meta) {
    EXPECT_EQ(meta.lease_count, 0u);
    entries.insert(key);
  });
  EXPECT_EQ(index.TrackedBlocks(TierId::kHost), entries.size());
  std::set<BlockKey> picked;
  while (auto victim = index.PickVictim(TierId::kHost, 0)) {
    EXPECT_TRUE(picked.insert(victim->first).second);
    (void)index.Erase(victim->first);
  }
  EXPECT_EQ(picked, entries);
  EXPECT_EQ(index.size(), 0u);
}

// Regression: PickVictim put each leased block back at once, where S3-FIFO (its small queue),
// ARC (its recent list) and TinyLFU (its window) took their next victim again while over their
// share: its tries went round the same leased blocks and it answered "nothing evictable" with
// most blocks free to go, so every put into the full tier failed while the leases lasted.
TEST_P(BlockIndexPoliciesTest, LeasedNewBlocksDoNotHideTheEvictableOldOnes) {
  constexpr size_t kCapacity = 100;
  // 60 leased: over S3-FIFO's small queue (10%) and ARC's recent share (50%); 2 besides a full
  // cache of old blocks: over TinyLFU's window (1%) while its main cache is full.
  for (const auto& [old, leased] : {std::pair<uint64_t, uint64_t>{40, 60}, {kCapacity, 2}}) {
    SCOPED_TRACE(std::to_string(old) + " old, " + std::to_string(leased) + " leased");
    auto created = BlockIndex::Create(
        {.shard_count = 8, .policy = GetParam(), .capacity_hint_blocks = kCapacity});
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    BlockIndex& index = **created;
    // Old blocks, each used twice since (S3-FIFO's main queue, ARC's frequent list, TinyLFU's
    // protected part).
    for (uint64_t i = 0; i < old; ++i) ASSERT_TRUE(index.InsertReady(Key(i), Meta()).ok());
    for (int round = 0; round < 2; ++round) {
      for (uint64_t i = 0; i < old; ++i) {
        const BlockKey key = Key(i);
        (void)index.Lookup({&key, 1}, /*touch=*/true);
      }
    }
    // New blocks, leased by readers.
    for (uint64_t i = 1000; i < 1000 + leased; ++i) {
      ASSERT_TRUE(index.InsertReady(Key(i), Meta()).ok());
      ASSERT_TRUE(index
                      .Update(Key(i),
                              [](BlockMeta& m) {
                                ++m.lease_count;
                                return Status::Ok();
                              })
                      .ok());
    }
    // Every old block can still be picked, one after another, and no leased one is.
    for (uint64_t n = 0; n < old; ++n) {
      auto victim = index.PickVictim(TierId::kHost, 0);
      ASSERT_TRUE(victim.has_value()) << "no victim after " << n << " of " << old;
      EXPECT_EQ(victim->second.lease_count, 0u);
      ASSERT_TRUE(index.Erase(victim->first).has_value());
    }
    EXPECT_FALSE(index.PickVictim(TierId::kHost, 0).has_value());  // only leased blocks left
    EXPECT_EQ(index.TrackedBlocks(TierId::kHost), leased);         // and all put back
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, BlockIndexPoliciesTest,
                         ::testing::ValuesIn(EvictionPolicyNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvtier::index
