#include "daemon/index/s3fifo_policy.h"

#include <gtest/gtest.h>

namespace kvtier::index {
namespace {

BlockKey Key(uint64_t n) { return BlockKey{{n * 0x9E3779B97F4A7C15ULL, n}}; }

// Inserts `key` and evicts down to `capacity`, as the store and the simulator do.
void Put(S3FifoPolicy& policy, uint64_t n, size_t capacity) {
  policy.Insert(Key(n));
  while (policy.size() > capacity) ASSERT_TRUE(policy.PopVictim().has_value());
}

TEST(S3FifoPolicyTest, UnusedBlocksLeaveTheSmallQueueInInsertionOrderIntoTheGhost) {
  S3FifoPolicy policy(/*capacity_hint_blocks=*/10);  // S: 1 block, M and G: 9
  for (uint64_t i = 1; i <= 3; ++i) policy.Insert(Key(i));
  EXPECT_EQ(policy.PopVictim(), Key(1));
  EXPECT_EQ(policy.PopVictim(), Key(2));
  EXPECT_EQ(policy.ghost_size(), 2u);
  EXPECT_FALSE(policy.Contains(Key(1)));
}

TEST(S3FifoPolicyTest, BlockUsedInTheSmallQueueMovesToMainAndSurvivesAScan) {
  constexpr size_t kCapacity = 10;
  S3FifoPolicy policy(kCapacity);
  Put(policy, 1, kCapacity);
  policy.Touch(Key(1));
  for (uint64_t i = 100; i < 200; ++i) Put(policy, i, kCapacity);
  EXPECT_TRUE(policy.Contains(Key(1)));
  EXPECT_EQ(policy.main_size(), 1u);
  EXPECT_EQ(policy.size(), kCapacity);
}

TEST(S3FifoPolicyTest, GhostHitGoesStraightToMain) {
  constexpr size_t kCapacity = 10;
  S3FifoPolicy policy(kCapacity);
  for (uint64_t i = 1; i <= 11; ++i) Put(policy, i, kCapacity);  // 1 leaves unused, to G
  ASSERT_FALSE(policy.Contains(Key(1)));
  const size_t main_before = policy.main_size();
  Put(policy, 1, kCapacity);
  EXPECT_TRUE(policy.Contains(Key(1)));
  EXPECT_EQ(policy.main_size(), main_before + 1);
}

// M is a FIFO whose blocks with uses left are put back (CLOCK): a used block outlives an unused
// older one, and uses are spent one per pass.
TEST(S3FifoPolicyTest, MainGivesUsedBlocksAnotherPass) {
  constexpr size_t kCapacity = 10;
  S3FifoPolicy policy(kCapacity);
  // Blocks 1..4, each used once in S, all move to M (their counts cleared) when S overflows.
  for (uint64_t i = 1; i <= 4; ++i) {
    policy.Insert(Key(i));
    policy.Touch(Key(i));
  }
  EXPECT_EQ(policy.PopVictim(), Key(1));
  EXPECT_EQ(policy.main_size(), 3u);
  EXPECT_EQ(policy.small_size(), 0u);
  policy.Touch(Key(2));  // the oldest now has a use left: put back once
  EXPECT_EQ(policy.PopVictim(), Key(3));
  EXPECT_EQ(policy.PopVictim(), Key(4));
  EXPECT_EQ(policy.PopVictim(), Key(2));
}

TEST(S3FifoPolicyTest, GhostHoldsAsManyKeysAsMain) {
  constexpr size_t kCapacity = 20;  // S: 2, M and G: 18
  S3FifoPolicy policy(kCapacity);
  for (uint64_t i = 0; i < 1000; ++i) Put(policy, i, kCapacity);
  EXPECT_EQ(policy.ghost_size(), 18u);
  EXPECT_EQ(policy.size(), kCapacity);
}

TEST(S3FifoPolicyTest, APutBackVictimGoesBackWithoutAGhostHit) {
  S3FifoPolicy policy(/*capacity_hint_blocks=*/10);
  for (uint64_t i = 1; i <= 3; ++i) policy.Insert(Key(i));
  ASSERT_EQ(policy.PopVictim(), Key(1));
  ASSERT_EQ(policy.PopVictim(), Key(2));
  policy.PutBack(Key(1));  // the store could not evict them (leased), in any order
  policy.PutBack(Key(2));
  EXPECT_EQ(policy.main_size(), 0u);  // back in S, not promoted as a ghost hit would be
  EXPECT_EQ(policy.ghost_size(), 0u);
  EXPECT_EQ(policy.PopVictim(), Key(3));  // and at the head, so the others go first
  // A victim of M leaves no ghost; put back, it returns to M.
  S3FifoPolicy main(/*capacity_hint_blocks=*/10);
  main.Insert(Key(7));
  main.Touch(Key(7));
  main.Insert(Key(8));
  ASSERT_EQ(main.PopVictim(), Key(8));  // S's unused block first; 7 moved to M on the way
  ASSERT_EQ(main.PopVictim(), Key(7));
  main.PutBack(Key(7));
  EXPECT_EQ(main.main_size(), 1u);
  EXPECT_TRUE(main.Contains(Key(7)));
}

TEST(S3FifoPolicyTest, EraseLeavesNoGhost) {
  S3FifoPolicy policy(/*capacity_hint_blocks=*/10);
  policy.Insert(Key(1));
  policy.Erase(Key(1));
  EXPECT_EQ(policy.ghost_size(), 0u);
  EXPECT_EQ(policy.size(), 0u);
}

TEST(S3FifoPolicyTest, WithoutAHintTheLargestSizeStandsInForTheCapacity) {
  S3FifoPolicy policy(/*capacity_hint_blocks=*/0);
  for (uint64_t i = 0; i < 1000; ++i) Put(policy, i, 20);
  EXPECT_EQ(policy.size(), 20u);
  EXPECT_LE(policy.ghost_size(), 21u);
}

}  // namespace
}  // namespace kvtier::index
