#include "daemon/index/arc_policy.h"

#include <gtest/gtest.h>

namespace kvtier::index {
namespace {

BlockKey Key(uint64_t n) { return BlockKey{{n * 0x9E3779B97F4A7C15ULL, n}}; }

// Inserts `key` and evicts down to `capacity`, as the store and the simulator do.
void Put(ArcPolicy& arc, uint64_t n, size_t capacity) {
  arc.Insert(Key(n));
  while (arc.size() > capacity) ASSERT_TRUE(arc.PopVictim().has_value());
}

TEST(ArcPolicyTest, OnceUsedBlocksLeaveInInsertionOrder) {
  ArcPolicy arc(/*capacity_hint_blocks=*/4);
  for (uint64_t i = 1; i <= 4; ++i) arc.Insert(Key(i));
  EXPECT_EQ(arc.PopVictim(), Key(1));
  EXPECT_EQ(arc.PopVictim(), Key(2));
}

// The property LRU lacks: a scan of one-time blocks, longer than the cache, does not flush a
// block that was used twice.
TEST(ArcPolicyTest, ReusedBlockSurvivesAScanOfOneTimeBlocks) {
  constexpr size_t kCapacity = 8;
  ArcPolicy arc(kCapacity);
  Put(arc, 1, kCapacity);
  arc.Touch(Key(1));
  for (uint64_t i = 100; i < 200; ++i) Put(arc, i, kCapacity);
  EXPECT_TRUE(arc.Contains(Key(1)));
  EXPECT_EQ(arc.size(), kCapacity);
}

TEST(ArcPolicyTest, RecentGhostHitGrowsTheRecentShareAndReadmitsAsFrequent) {
  constexpr size_t kCapacity = 4;
  ArcPolicy arc(kCapacity);
  for (uint64_t i = 1; i <= 5; ++i) Put(arc, i, kCapacity);  // 1 goes to the recent ghost
  ASSERT_FALSE(arc.Contains(Key(1)));
  const double before = arc.recent_target_share();
  Put(arc, 1, kCapacity);
  EXPECT_GT(arc.recent_target_share(), before);
  EXPECT_TRUE(arc.Contains(Key(1)));
  // Readmitted as frequent: a later scan of one-time blocks leaves it alone.
  for (uint64_t i = 10; i < 30; ++i) Put(arc, i, kCapacity);
  EXPECT_TRUE(arc.Contains(Key(1)));
}

TEST(ArcPolicyTest, FrequentGhostHitShrinksTheRecentShare) {
  constexpr size_t kCapacity = 4;
  ArcPolicy arc(kCapacity);
  for (uint64_t i = 1; i <= 4; ++i) {
    arc.Insert(Key(i));
    arc.Touch(Key(i));  // all four frequent
  }
  arc.Insert(Key(5));
  // T1 = {5} is within its share (2 of 4), so the least recent frequent block goes.
  ASSERT_EQ(arc.PopVictim(), Key(1));
  const double before = arc.recent_target_share();
  arc.Insert(Key(1));
  EXPECT_LT(arc.recent_target_share(), before);
}

TEST(ArcPolicyTest, APutBackVictimIsRestoredWithoutAdapting) {
  ArcPolicy arc(/*capacity_hint_blocks=*/4);
  for (uint64_t i = 1; i <= 4; ++i) arc.Insert(Key(i));
  const double before = arc.recent_target_share();
  std::optional<BlockKey> victim = arc.PopVictim();
  ASSERT_EQ(victim, Key(1));
  arc.PutBack(*victim);  // the store could not evict it (leased)
  EXPECT_EQ(arc.recent_target_share(), before);
  EXPECT_EQ(arc.ghost_size(), 0u);
  EXPECT_TRUE(arc.Contains(Key(1)));
  EXPECT_EQ(arc.PopVictim(), Key(2));  // put back as just used, so the others go first
}

// Regression: only the last victim was restored quietly; an earlier one put back after others
// had been popped (a batch of victims, or another thread's) counted as a ghost hit.
TEST(ArcPolicyTest, AnyVictimPutBackIsNotAGhostHit) {
  ArcPolicy arc(/*capacity_hint_blocks=*/4);
  for (uint64_t i = 1; i <= 4; ++i) arc.Insert(Key(i));
  const double before = arc.recent_target_share();
  ASSERT_EQ(arc.PopVictim(), Key(1));
  ASSERT_EQ(arc.PopVictim(), Key(2));
  arc.PutBack(Key(1));
  arc.PutBack(Key(2));
  EXPECT_EQ(arc.recent_target_share(), before);
  EXPECT_EQ(arc.ghost_size(), 0u);
  EXPECT_EQ(arc.PopVictim(), Key(3));
  // A new Insert of a ghost right after it was popped is a ghost hit: wanted again, not put back.
  ASSERT_EQ(arc.PopVictim(), Key(4));
  arc.Insert(Key(4));
  EXPECT_GT(arc.recent_target_share(), before);
}

TEST(ArcPolicyTest, EraseLeavesNoGhost) {
  ArcPolicy arc(/*capacity_hint_blocks=*/4);
  arc.Insert(Key(1));
  arc.Erase(Key(1));
  EXPECT_EQ(arc.ghost_size(), 0u);
  EXPECT_EQ(arc.size(), 0u);
}

TEST(ArcPolicyTest, GhostListsStayWithinTheCapacity) {
  constexpr size_t kCapacity = 16;
  ArcPolicy arc(kCapacity);
  for (uint64_t i = 0; i < 10000; ++i) {
    Put(arc, i, kCapacity);
    if (i % 2 == 0) arc.Touch(Key(i));
  }
  EXPECT_LE(arc.ghost_size(), 2 * kCapacity);
  EXPECT_EQ(arc.size(), kCapacity);
}

TEST(ArcPolicyTest, WithoutAHintTheLargestSizeStandsInForTheCapacity) {
  ArcPolicy arc(/*capacity_hint_blocks=*/0);
  for (uint64_t i = 0; i < 1000; ++i) Put(arc, i, 10);
  EXPECT_EQ(arc.size(), 10u);
  EXPECT_LE(arc.ghost_size(), 2 * 11u);  // 11: the size just before each eviction
}

}  // namespace
}  // namespace kvtier::index
