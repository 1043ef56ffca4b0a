#include "daemon/index/sticky_lru_policy.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

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
    policy.PutBack(*victim);  // leased: the store hands it back
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

// Keys as the daemon's are: uniform hashes, so 1 in 16 is sampled.
BlockKey HashedKey(uint64_t n) { return BlockKey{{n * 0x9E3779B97F4A7C15ULL, n}}; }

struct LoopCounts {
  uint64_t late_hits = 0;
  uint64_t late_uses = 0;
  uint64_t refused = 0;
};

// A loop of 1.5 x the cache's keys, one key every 64 ms, 20 times round, as the store drives a
// tier: a hit touches, a miss inserts unless the full tier's policy refuses, then evicts.
LoopCounts RunLoop(EvictionPolicy& policy, uint64_t& now, size_t capacity) {
  LoopCounts counts;
  for (uint64_t round = 0; round < 20; ++round) {
    for (uint64_t i = 0; i < capacity * 3 / 2; ++i) {
      now += 64;
      const BlockKey key = HashedKey(i);
      counts.late_uses += round >= 10;
      if (policy.Contains(key)) {
        policy.Touch(key);
        counts.late_hits += round >= 10;
        continue;
      }
      if (policy.size() >= capacity && !policy.AdmitsNew()) {
        policy.NotAdmitted(key);
        ++counts.refused;
        continue;
      }
      policy.Insert(key);
      while (policy.size() > capacity) EXPECT_TRUE(policy.PopVictim().has_value());
    }
  }
  return counts;
}

// LRU's victims are always younger than every key's reuse gap, and an LRU of this size never
// hits. Once the shadows have shown that keeping pays, sticky refuses new keys while its victim
// is that young, and keeps hitting the two thirds of the loop it holds.
TEST_F(StickyLruPolicyTest, RefusesNewBlocksWhileALoopLargerThanTheCacheThrashesIt) {
  constexpr size_t kCapacity = 1024;
  uint64_t lru_now = 0;
  std::unique_ptr<EvictionPolicy> lru = std::move(MakeEvictionPolicy("lru")).value();
  const LoopCounts lru_counts = RunLoop(*lru, lru_now, kCapacity);
  EXPECT_EQ(lru_counts.late_hits, 0u);
  EXPECT_EQ(lru_counts.refused, 0u);

  StickyLruPolicy policy = Make(kCapacity);
  const LoopCounts counts = RunLoop(policy, *now_, kCapacity);
  EXPECT_TRUE(policy.protecting());
  ASSERT_TRUE(policy.reuse_gap_ms().has_value());
  EXPECT_EQ(*policy.reuse_gap_ms(), kCapacity * 3 / 2 * 64);
  EXPECT_GT(counts.refused, 0u);
  EXPECT_GT(counts.late_hits, counts.late_uses / 2);
}

// Until it has measured reuse gaps the policy is LRU: a loop whose returns the ghost cannot see
// (every key sampled, so its capacity/16 keys remember a sixteenth of the evictions) is never
// refused.
TEST_F(StickyLruPolicyTest, WithoutMeasuredGapsItAdmitsLikeLru) {
  constexpr size_t kCapacity = 512;
  StickyLruPolicy policy = Make(kCapacity);
  for (uint64_t round = 0; round < 10; ++round) {
    for (uint64_t i = 0; i < 2 * kCapacity; ++i) {
      *now_ += 64;
      if (policy.Contains(SampledKey(i))) {
        policy.Touch(SampledKey(i));
        continue;
      }
      ASSERT_TRUE(policy.size() < kCapacity || policy.AdmitsNew());
      policy.Insert(SampledKey(i));
      while (policy.size() > kCapacity) ASSERT_TRUE(policy.PopVictim().has_value());
    }
  }
  EXPECT_FALSE(policy.reuse_gap_ms().has_value());
}

TEST_F(StickyLruPolicyTest, ARefreshReordersWithoutMeasuringAGap) {
  StickyLruPolicy policy = Make(1'000);
  for (uint64_t i = 0; i < 64; ++i) policy.Insert(SampledKey(i));
  *now_ += 5'000;
  for (uint64_t i = 64; i-- > 0;) policy.Refresh(SampledKey(i));
  EXPECT_FALSE(policy.reuse_gap_ms().has_value()) << "a refresh is not a reuse";
  for (uint64_t i = 0; i < 64; ++i) policy.Touch(SampledKey(i));
  ASSERT_TRUE(policy.reuse_gap_ms().has_value());
  EXPECT_EQ(*policy.reuse_gap_ms(), 5'000u) << "measured from the insert, not the refresh";
  // Touched 0..63: 0 is the least recent.
  EXPECT_EQ(policy.PopVictim(), SampledKey(0));
  policy.Refresh(SampledKey(1));
  EXPECT_EQ(policy.PopVictim(), SampledKey(2)) << "1 was moved to the head";
}

// TouchRun finds and moves a run's keys together (SegmentedLists::FindRun, MoveRunToHead); it
// must decide as Touch of each key, deepest first, does: the same gaps measured, shadows
// replayed, admissions and victims. Conversations whose prefixes come back and grow, a key
// repeated in a run now and then, a cache small enough to refuse and evict.
TEST(StickyLruPolicyRunTest, TouchRunDecidesAsTouchesOneByOne) {
  auto now = std::make_shared<uint64_t>(1'000);
  StickyLruPolicy::Params params;
  params.sample_one_in = 4;  // more gaps measured, so G and the duel move within the test
  params.gap_window = 256;
  constexpr size_t kCapacity = 300;
  StickyLruPolicy by_run(
      kCapacity, [now] { return *now; }, params);
  StickyLruPolicy by_key(
      kCapacity, [now] { return *now; }, params);
  std::mt19937_64 rng(5);
  std::vector<size_t> lengths(40, 1);
  size_t refused = 0;
  for (int step = 0; step < 6'000; ++step) {
    *now += rng() % 50;
    const size_t c = rng() % lengths.size();
    if (rng() % 3 == 0) lengths[c] += 1 + rng() % 8;
    std::vector<BlockKey> run;
    for (size_t j = 0; j < lengths[c]; ++j) run.push_back(HashedKey(c * 10'000 + j));
    if (rng() % 16 == 0) run.push_back(run[rng() % run.size()]);
    by_run.TouchRun(run);
    for (size_t i = run.size(); i-- > 0;) by_key.Touch(run[i]);
    // The request's new blocks, as the store puts them.
    for (const BlockKey& key : run) {
      ASSERT_EQ(by_run.Contains(key), by_key.Contains(key)) << "step " << step;
      if (by_run.Contains(key)) continue;
      const bool admits = by_run.size() < kCapacity || by_run.AdmitsNew();
      ASSERT_EQ(admits, by_key.size() < kCapacity || by_key.AdmitsNew()) << "step " << step;
      if (!admits) {
        by_run.NotAdmitted(key);
        by_key.NotAdmitted(key);
        ++refused;
        break;
      }
      by_run.Insert(key);
      by_key.Insert(key);
      while (by_run.size() > kCapacity) {
        ASSERT_EQ(by_run.PopVictim(), by_key.PopVictim()) << "step " << step;
      }
    }
    ASSERT_EQ(by_run.reuse_gap_ms(), by_key.reuse_gap_ms()) << "step " << step;
    ASSERT_EQ(by_run.protecting(), by_key.protecting()) << "step " << step;
    ASSERT_EQ(by_run.ghost_size(), by_key.ghost_size()) << "step " << step;
  }
  ASSERT_TRUE(by_run.reuse_gap_ms().has_value());
  EXPECT_GT(refused, 0u) << "the policy never protected: the test would miss its decisions";
  while (true) {
    const std::optional<BlockKey> victim = by_run.PopVictim();
    ASSERT_EQ(victim, by_key.PopVictim());
    if (!victim) break;
  }
}

TEST(StickyLruPolicyParamsTest, ParsesNamedValuesAndKeepsTheRestAtTheirDefaults) {
  Result<StickyLruPolicy::Params> p =
      StickyLruPolicy::ParseParams("quantile=0.6,sample=32,ghost=4");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->gap_quantile, 0.6);
  EXPECT_EQ(p->sample_one_in, 32u);
  EXPECT_EQ(p->ghost_factor, 4.0);
  EXPECT_EQ(p->gap_window, StickyLruPolicy::Params{}.gap_window);
  EXPECT_EQ(p->duel_margin_sigmas, StickyLruPolicy::Params{}.duel_margin_sigmas);
  ASSERT_TRUE(StickyLruPolicy::ParseParams("").ok());
  p = StickyLruPolicy::ParseParams("window=1024,memory=8,margin=0");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->gap_window, 1024u);
  EXPECT_EQ(p->duel_memory_gaps, 8.0);
  EXPECT_EQ(p->duel_margin_sigmas, 0.0);
}

TEST(StickyLruPolicyParamsTest, RejectsUnknownNamesAndValuesOutOfRange) {
  for (const char* bad :
       {"nope=1", "quantile", "quantile=", "quantile=1", "quantile=-0.1", "quantile=0.5x",
        "sample=3", "sample=0", "sample=2048", "sample=-1", "sample=1e30", "sample=2.5", "window=0",
        "window=1.5", "memory=0", "margin=-1", "ghost=-1", "margin=nan", "quantile=0.5,,"}) {
    const Result<StickyLruPolicy::Params> p = StickyLruPolicy::ParseParams(bad);
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(StickyLruPolicyParamsTest, SampleOneInOneMeasuresEveryKey) {
  auto now = std::make_shared<uint64_t>(1'000);
  StickyLruPolicy::Params params;
  params.sample_one_in = 1;
  StickyLruPolicy policy(
      1'000, [now] { return *now; }, params);
  for (uint64_t i = 0; i < 64; ++i) policy.Insert(UnsampledKey(i));
  *now += 3'000;
  for (uint64_t i = 0; i < 64; ++i) policy.Touch(UnsampledKey(i));
  ASSERT_TRUE(policy.reuse_gap_ms().has_value());
  EXPECT_EQ(*policy.reuse_gap_ms(), 3'000u);
}

}  // namespace
}  // namespace kvtier::index
