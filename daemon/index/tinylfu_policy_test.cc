#include "daemon/index/tinylfu_policy.h"

#include <gtest/gtest.h>

namespace kvtier::index {
namespace {

BlockKey Key(uint64_t n) { return BlockKey{{n * 0x9E3779B97F4A7C15ULL, n}}; }

// Inserts `key` and evicts down to `capacity`, as the store and the simulator do.
void Put(TinyLfuPolicy& policy, uint64_t n, size_t capacity) {
  policy.Insert(Key(n));
  while (policy.size() > capacity) ASSERT_TRUE(policy.PopVictim().has_value());
}

// Capacity 100: a window of 1 block, a main cache of 99 with 79 protected.
constexpr size_t kCapacity = 100;

TEST(TinyLfuPolicyTest, FillsTheMainCacheFreelyThenKeepsTheWindowAtOnePercent) {
  TinyLfuPolicy policy(kCapacity);
  for (uint64_t i = 0; i < kCapacity + 1; ++i) Put(policy, i, kCapacity);
  EXPECT_EQ(policy.size(), kCapacity);
  EXPECT_EQ(policy.window_size(), 1u);
  EXPECT_EQ(policy.probation_size(), 99u);
}

// The admission rule: a newcomer used no more often than the main cache's victim is the one
// that goes, so a scan of one-time blocks (shorter than the sketch's sample: a longer one halves
// the incumbents' counts, and then newcomers win) leaves the main cache nearly as it was. Nearly:
// a newcomer whose counters all collide with used ones looks more frequent than it is.
TEST(TinyLfuPolicyTest, ScanOfOneTimeBlocksBarelyEntersAFullMainCache) {
  constexpr size_t kLarge = 1000;
  TinyLfuPolicy policy(kLarge);
  for (uint64_t i = 0; i < kLarge; ++i) Put(policy, i, kLarge);
  for (uint64_t i = 100'000; i < 102'000; ++i) Put(policy, i, kLarge);
  size_t kept = 0;
  for (uint64_t i = 0; i < kLarge; ++i) kept += policy.Contains(Key(i));
  EXPECT_GE(kept, kLarge * 9 / 10);  // LRU would keep none
}

TEST(TinyLfuPolicyTest, MoreFrequentNewcomerDisplacesTheMainVictim) {
  TinyLfuPolicy policy(kCapacity);
  for (uint64_t i = 0; i < kCapacity; ++i) Put(policy, i, kCapacity);
  // Key 5000 was used often before it is inserted (as a block missed again and again would be).
  for (int use = 0; use < 3; ++use) {
    Put(policy, 5000, kCapacity);
    policy.Erase(Key(5000));
  }
  Put(policy, 5000, kCapacity);
  Put(policy, 5001, kCapacity);  // pushes 5000 out of the window: the admission decision
  EXPECT_TRUE(policy.Contains(Key(5000)));
  EXPECT_GE(policy.Frequency(Key(5000)), 4u);
}

TEST(TinyLfuPolicyTest, UseInProbationProtectsAndProtectedOverflowReturnsToProbation) {
  TinyLfuPolicy policy(kCapacity);
  for (uint64_t i = 0; i < kCapacity + 1; ++i) Put(policy, i, kCapacity);
  for (uint64_t i = 1; i <= 80; ++i) policy.Touch(Key(i));  // 80 uses, 79 protected places
  EXPECT_EQ(policy.protected_size(), 79u);
  EXPECT_EQ(policy.probation_size(), 20u);
}

TEST(TinyLfuPolicyTest, APutBackVictimCountsNoUse) {
  TinyLfuPolicy policy(kCapacity);
  for (uint64_t i = 0; i < kCapacity + 1; ++i) policy.Insert(Key(i));
  std::optional<BlockKey> first = policy.PopVictim();
  std::optional<BlockKey> second = policy.PopVictim();
  ASSERT_TRUE(first.has_value() && second.has_value());
  const uint32_t before = policy.Frequency(*first);
  policy.PutBack(*first);  // the store could not evict it (leased), after another was popped
  EXPECT_EQ(policy.Frequency(*first), before);
  EXPECT_TRUE(policy.Contains(*first));
  EXPECT_NE(policy.PopVictim(), first);
}

TEST(TinyLfuPolicyTest, WithoutAHintTheLargestSizeStandsInForTheCapacity) {
  TinyLfuPolicy policy(/*capacity_hint_blocks=*/0);
  for (uint64_t i = 0; i < 5000; ++i) Put(policy, i, 200);
  EXPECT_EQ(policy.size(), 200u);
  EXPECT_EQ(policy.window_size(), 2u);  // 1% of 201, the size just before each eviction
}

}  // namespace
}  // namespace kvtier::index
