#include "daemon/index/sticky_lru_policy.h"

#include <gtest/gtest.h>

#include <memory>

namespace kvtier::index {
namespace {

// The policy measures gaps and replays shadows on keys whose high word's top 4 bits are 0.
BlockKey SampledKey(uint64_t n) { return BlockKey{{n, n}}; }
BlockKey UnsampledKey(uint64_t n) { return BlockKey{{(uint64_t{1} << 60) | n, n}}; }

class StickyLruPolicyTest : public ::testing::Test {
 protected:
  std::shared_ptr<uint64_t> now_ = std::make_shared<uint64_t>(1'000);
  StickyLruPolicy Make(size_t capacity) {
    return StickyLruPolicy(capacity, [now = now_] { return *now; });
  }
};

TEST_F(StickyLruPolicyTest, EvictsInLruOrderAndAdmitsWhileItHasLearnedNothing) {
  StickyLruPolicy policy = Make(4);
  for (uint64_t i = 1; i <= 4; ++i) policy.Insert(UnsampledKey(i));
  policy.Touch(UnsampledKey(1));
  EXPECT_TRUE(policy.AdmitsNew());
  EXPECT_FALSE(policy.protecting());
  for (uint64_t expected : {2, 3, 4, 1}) EXPECT_EQ(policy.PopVictim(), UnsampledKey(expected));
  EXPECT_FALSE(policy.PopVictim().has_value());
}

TEST_F(StickyLruPolicyTest, LearnsTheReuseGapFromSampledKeysOnly) {
  StickyLruPolicy policy = Make(1'000);
  for (uint64_t i = 0; i < 64; ++i) {
    policy.Insert(SampledKey(i));
    policy.Insert(UnsampledKey(i));
  }
  EXPECT_FALSE(policy.reuse_gap_ms().has_value());
  *now_ += 5'000;
  for (uint64_t i = 0; i < 64; ++i) policy.Touch(UnsampledKey(i));
  EXPECT_FALSE(policy.reuse_gap_ms().has_value()) << "unsampled keys are not measured";
  for (uint64_t i = 0; i < 64; ++i) policy.Touch(SampledKey(i));
  ASSERT_TRUE(policy.reuse_gap_ms().has_value());
  EXPECT_EQ(*policy.reuse_gap_ms(), 5'000u);
}

TEST_F(StickyLruPolicyTest, GhostKeysMeasureTheGapsOfBlocksLruGaveUp) {
  StickyLruPolicy policy = Make(64);
  for (uint64_t i = 0; i < 64; ++i) policy.Insert(SampledKey(i));
  for (uint64_t i = 0; i < 64; ++i) ASSERT_EQ(policy.PopVictim(), SampledKey(i));
  EXPECT_GT(policy.ghost_size(), 0u);
  EXPECT_LE(policy.ghost_size(), 16u) << "the ghost holds capacity / 16 keys (at least 16)";
  // The last 16 evicted are remembered: back 7 s later, their gap is measured, the others' not.
  *now_ += 7'000;
  for (uint64_t round = 0; round < 4; ++round) {
    for (uint64_t i = 48; i < 64; ++i) {
      policy.Insert(SampledKey(i));
      EXPECT_TRUE(policy.Contains(SampledKey(i)));
      policy.Erase(SampledKey(i));
      policy.NotAdmitted(SampledKey(i));  // back to the ghost, stamped now
    }
    *now_ += 7'000;
  }
  ASSERT_TRUE(policy.reuse_gap_ms().has_value());
  EXPECT_EQ(*policy.reuse_gap_ms(), 7'000u);
}

TEST_F(StickyLruPolicyTest, AVictimPutBackIsNotAReuse) {
  StickyLruPolicy policy = Make(1'000);
  for (uint64_t i = 0; i < 64; ++i) policy.Insert(SampledKey(i));
  *now_ += 3'000;
  for (uint64_t i = 0; i < 64; ++i) {
    const std::optional<BlockKey> victim = policy.PopVictim();
    ASSERT_TRUE(victim.has_value());
    policy.Insert(*victim);  // leased: the store hands it back at once
  }
  EXPECT_FALSE(policy.reuse_gap_ms().has_value());
  EXPECT_EQ(policy.size(), 64u);
}

TEST_F(StickyLruPolicyTest, NotAdmittedLeavesATrackedKeyAlone) {
  StickyLruPolicy policy = Make(8);
  policy.Insert(SampledKey(1));
  policy.NotAdmitted(SampledKey(1));
  EXPECT_TRUE(policy.Contains(SampledKey(1)));
  EXPECT_EQ(policy.size(), 1u);
  EXPECT_EQ(policy.ghost_size(), 0u);
}

// A loop of sampled keys twice the cache, each key used every 65.5 s: LRU's victims are always
// 33 s old, younger than every reuse gap, and an LRU of this size never hits. Once the shadows
// have shown that keeping pays, the policy refuses new keys while its victim is that young.
TEST_F(StickyLruPolicyTest, RefusesNewBlocksWhileALoopLargerThanTheCacheThrashesIt) {
  constexpr size_t kCapacity = 512;
  StickyLruPolicy policy = Make(kCapacity);
  uint64_t hits = 0, refused = 0, late_hits = 0;
  for (uint64_t round = 0; round < 20; ++round) {
    for (uint64_t i = 0; i < 2 * kCapacity; ++i) {
      *now_ += 64;  // about 16 keys a second
      const BlockKey key = SampledKey(i);
      if (policy.Contains(key)) {
        policy.Touch(key);
        ++hits;
        late_hits += round >= 10;
        continue;
      }
      if (policy.size() >= kCapacity && !policy.AdmitsNew()) {
        policy.NotAdmitted(key);
        ++refused;
        continue;
      }
      policy.Insert(key);
      while (policy.size() > kCapacity) ASSERT_TRUE(policy.PopVictim().has_value());
    }
  }
  EXPECT_TRUE(policy.protecting());
  ASSERT_TRUE(policy.reuse_gap_ms().has_value());
  EXPECT_EQ(*policy.reuse_gap_ms(), 2 * kCapacity * 64);
  EXPECT_GT(refused, 0u);
  // Half the loop fits: a sticky cache hits about half of each late round's uses.
  EXPECT_GT(late_hits, 10 * kCapacity * 8 / 10);
  EXPECT_LE(hits, 20 * 2 * kCapacity);
}

}  // namespace
}  // namespace kvtier::index
