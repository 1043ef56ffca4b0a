// BlockIndex's quota groups: which order PickVictim takes its victims from, and the bytes each
// group is counted for in each tier.
#include <gtest/gtest.h>

#include <thread>

#include "daemon/index/block_index.h"

namespace kvtier::index {
namespace {

constexpr uint64_t kBlock = 4096;
constexpr uint8_t kQuiet = 1;
constexpr uint8_t kNoisy = 2;

BlockKey Key(uint64_t n) { return BlockKey{{7, n}}; }

class BlockIndexQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto index = BlockIndex::Create({.shard_count = 4, .policy = "lru"});
    ASSERT_TRUE(index.ok());
    index_ = std::move(index).value();
  }
  // Block n of quota group `group` (0: none), in the host tier.
  void Insert(uint64_t n, uint8_t group, NamespaceId ns = {}) {
    BlockMeta meta;
    meta.ns = ns;
    meta.tier = TierId::kHost;
    meta.extent = {n * kBlock, kBlock};
    meta.quota_group = group;
    ASSERT_TRUE(index_->InsertReady(Key(n), meta).ok());
  }
  // The next victim for `requester`, erased as the store would; 0 when there is none.
  uint64_t Evict(uint8_t requester) {
    auto victim = index_->PickVictim(TierId::kHost, 0, requester);
    if (!victim) return 0;
    EXPECT_TRUE(index_->Erase(victim->first).has_value());
    return victim->first.low;
  }
  std::unique_ptr<BlockIndex> index_;
};

TEST_F(BlockIndexQuotaTest, AGroupWithinItsQuotaIsNeverAnotherGroupsVictim) {
  ASSERT_TRUE(index_->SetGroupQuota(kQuiet, TierId::kHost, 2 * kBlock).ok());
  Insert(1, kQuiet);  // the oldest block of all
  Insert(2, kQuiet);
  Insert(3, kNoisy);
  Insert(4, 0);
  // The quiet group holds exactly its quota: the others' blocks go, oldest first, and then nothing.
  EXPECT_EQ(Evict(kNoisy), 3u);
  EXPECT_EQ(Evict(0), 4u);
  EXPECT_EQ(Evict(kNoisy), 0u);
  EXPECT_EQ(Evict(0), 0u);
  // The quiet group itself may make room among its own blocks.
  EXPECT_EQ(Evict(kQuiet), 1u);
  EXPECT_EQ(index_->QuotaUsage(kQuiet, TierId::kHost).used_bytes, kBlock);
}

TEST_F(BlockIndexQuotaTest, AGroupOverItsQuotaGivesUpItsOwnBlocksFirst) {
  ASSERT_TRUE(index_->SetGroupQuota(kQuiet, TierId::kHost, 1 * kBlock).ok());
  ASSERT_TRUE(index_->SetGroupQuota(kNoisy, TierId::kHost, 1 * kBlock).ok());
  Insert(1, 0);
  Insert(2, kQuiet);
  Insert(3, kNoisy);
  Insert(4, kNoisy);
  Insert(5, kNoisy);
  Insert(6, kQuiet);
  // Noisy is 2 blocks over, quiet 1: whoever asks, the furthest over goes first, then the
  // requester's own excess before the furthest over.
  EXPECT_EQ(Evict(0), 3u);
  EXPECT_EQ(Evict(kQuiet), 2u);  // quiet's own excess first, though noisy is as far over
  EXPECT_EQ(Evict(kNoisy), 4u);  // noisy's own last excess
  // Both at their quota now: the block of no group goes, then nothing another group may take.
  EXPECT_EQ(Evict(0), 1u);
  EXPECT_EQ(Evict(0), 0u);
  EXPECT_EQ(index_->QuotaUsage(kNoisy, TierId::kHost).used_bytes, kBlock);
  EXPECT_EQ(index_->QuotaUsage(kQuiet, TierId::kHost).used_bytes, kBlock);
}

TEST_F(BlockIndexQuotaTest, AnUnevictableGroupDoesNotHideTheOthersVictims) {
  ASSERT_TRUE(index_->SetGroupQuota(kNoisy, TierId::kHost, 1 * kBlock).ok());
  Insert(1, kNoisy);
  Insert(2, kNoisy);
  Insert(3, 0);
  // Noisy is over its quota, but both its blocks are leased: the common order still gives one.
  for (uint64_t n : {1, 2}) {
    ASSERT_TRUE(index_->Update(Key(n), [](BlockMeta& m) {
                        ++m.lease_count;
                        return Status::Ok();
                      }).ok());
  }
  EXPECT_EQ(Evict(kQuiet), 3u);
  EXPECT_EQ(Evict(kQuiet), 0u);
  EXPECT_EQ(index_->TrackedBlocks(TierId::kHost), 2u);  // the leased ones went back
}

TEST_F(BlockIndexQuotaTest, SettingAndClearingAQuotaMovesTheGroupsBlocks) {
  Insert(1, kQuiet);
  Insert(2, 0);
  // No quota yet: the quiet group's block is in the common order, and the oldest.
  ASSERT_TRUE(index_->SetGroupQuota(kQuiet, TierId::kHost, 4 * kBlock).ok());
  EXPECT_EQ(index_->TrackedBlocks(TierId::kHost), 2u);
  EXPECT_EQ(index_->QuotaUsage(kQuiet, TierId::kHost).quota_bytes, 4 * kBlock);
  EXPECT_EQ(Evict(0), 2u);
  EXPECT_EQ(Evict(0), 0u);  // block 1 is protected now
  ASSERT_TRUE(index_->SetGroupQuota(kQuiet, TierId::kHost, 0).ok());
  EXPECT_EQ(Evict(0), 1u);  // and no longer
  EXPECT_EQ(index_->SetGroupQuota(0, TierId::kHost, kBlock).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index_->SetGroupQuota(kMaxQuotaGroups, TierId::kHost, kBlock).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(BlockIndexQuotaTest, ANamespaceJoinsAGroupWithTheBlocksItHolds) {
  const NamespaceId ns{{0xCC, 3}};
  ASSERT_TRUE(index_->SetGroupQuota(kQuiet, TierId::kHost, 4 * kBlock).ok());
  Insert(1, 0, ns);
  Insert(2, 0);
  index_->AssignQuotaGroups({{ns, kQuiet}});
  EXPECT_EQ(index_->QuotaUsage(kQuiet, TierId::kHost).used_bytes, kBlock);
  EXPECT_EQ(index_->QuotaUsage(0, TierId::kHost).used_bytes, kBlock);
  EXPECT_EQ(Evict(0), 2u);
  EXPECT_EQ(Evict(0), 0u);
  // Touching the protected block finds it in its group's order (it stays tracked once).
  EXPECT_EQ(index_->Lookup(std::vector{Key(1)}, /*touch=*/true).ready_prefix, 1u);
  EXPECT_EQ(index_->TrackedBlocks(TierId::kHost), 1u);
  index_->AssignQuotaGroups({{ns, 0}});
  EXPECT_EQ(index_->QuotaUsage(kQuiet, TierId::kHost).used_bytes, 0u);
  EXPECT_EQ(Evict(0), 1u);
}

TEST_F(BlockIndexQuotaTest, EveryGroupGivesUpItsBlocksToAFlush) {
  ASSERT_TRUE(index_->SetGroupQuota(kQuiet, TierId::kHost, 4 * kBlock).ok());
  Insert(1, kQuiet);
  Insert(2, 0);
  Insert(3, kQuiet);
  size_t taken = 0;
  while (index_->PickVictim(TierId::kHost, 0, kEveryGroup)) ++taken;
  EXPECT_EQ(taken, 3u);
}

TEST_F(BlockIndexQuotaTest, MovingAndErasingBlocksKeepsTheGroupsBytes) {
  ASSERT_TRUE(index_->SetGroupQuota(kQuiet, TierId::kNvme, 4 * kBlock).ok());
  Insert(1, kQuiet);
  Insert(2, kQuiet);
  BlockMeta meta = *index_->Get(Key(1));
  ASSERT_TRUE(index_->MoveTier(Key(1), meta, TierId::kNvme, {0, kBlock}).ok());
  EXPECT_EQ(index_->QuotaUsage(kQuiet, TierId::kHost).used_bytes, kBlock);
  EXPECT_EQ(index_->QuotaUsage(kQuiet, TierId::kNvme).used_bytes, kBlock);
  ASSERT_TRUE(index_->Erase(Key(1)).has_value());
  ASSERT_TRUE(index_->Erase(Key(2)).has_value());
  EXPECT_EQ(index_->QuotaUsage(kQuiet, TierId::kHost).used_bytes, 0u);
  EXPECT_EQ(index_->QuotaUsage(kQuiet, TierId::kNvme).used_bytes, 0u);
  EXPECT_EQ(index_->TrackedBlocks(TierId::kNvme), 0u);
}

// An operator's quota change and a namespace's regrouping may come at once (the store takes its
// own lock around both today; the index must not depend on it): every block must end up in
// exactly one eviction order, or it could never be evicted again.
TEST_F(BlockIndexQuotaTest, QuotaChangesAndRegroupingAtOnceLoseNoBlock) {
  const NamespaceId ns{{0xDD, 4}};
  constexpr uint64_t kBlocks = 4000;
  for (uint64_t n = 1; n <= kBlocks; ++n) Insert(n, 0, ns);
  constexpr int kRounds = 200;
  std::thread quotas([&] {
    for (int i = 0; i < kRounds; ++i) {
      EXPECT_TRUE(index_->SetGroupQuota(kQuiet, TierId::kHost, i % 2 == 0 ? kBlock : 0).ok());
    }
  });
  std::thread regroup([&] {
    for (int i = 0; i < kRounds; ++i) index_->AssignQuotaGroups({{ns, i % 2 == 0 ? kQuiet : 0}});
  });
  std::thread rival([&] {
    for (int i = 0; i < kRounds; ++i) {
      EXPECT_TRUE(index_->SetGroupQuota(kQuiet, TierId::kHost, i % 2 == 0 ? 0 : kBlock).ok());
    }
  });
  quotas.join();
  regroup.join();
  rival.join();
  EXPECT_EQ(index_->TrackedBlocks(TierId::kHost), kBlocks);
  // And each is evictable: a flush takes every one.
  size_t taken = 0;
  while (index_->PickVictim(TierId::kHost, 0, kEveryGroup)) ++taken;
  EXPECT_EQ(taken, kBlocks);
}

}  // namespace
}  // namespace kvtier::index
