#include "daemon/index/eviction_policy.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <set>
#include <vector>

// The EvictionPolicy contract, checked for every policy MakeEvictionPolicy knows. Each policy's
// own ordering is tested in its own file.

namespace kvtier::index {
namespace {

BlockKey Key(uint64_t n) { return BlockKey{{n * 0x9E3779B97F4A7C15ULL, n}}; }

class EvictionPolicyContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<EvictionPolicy> Make(size_t capacity_hint_blocks = 8) {
    auto policy = MakeEvictionPolicy(GetParam(), capacity_hint_blocks);
    EXPECT_TRUE(policy.ok()) << policy.status().ToString();
    return std::move(policy).value();
  }
};

TEST_P(EvictionPolicyContractTest, NameMatchesFactoryName) {
  EXPECT_EQ(Make()->name(), GetParam());
}

TEST_P(EvictionPolicyContractTest, EmptyPolicyHasNoVictim) {
  auto policy = Make();
  EXPECT_EQ(policy->size(), 0u);
  EXPECT_FALSE(policy->PopVictim().has_value());
  EXPECT_FALSE(policy->Contains(Key(1)));
}

TEST_P(EvictionPolicyContractTest, InsertTracksKeys) {
  auto policy = Make();
  for (uint64_t i = 1; i <= 3; ++i) policy->Insert(Key(i));
  EXPECT_EQ(policy->size(), 3u);
  for (uint64_t i = 1; i <= 3; ++i) EXPECT_TRUE(policy->Contains(Key(i)));
  EXPECT_FALSE(policy->Contains(Key(4)));
}

TEST_P(EvictionPolicyContractTest, TouchOfAbsentKeyIsANoOp) {
  auto policy = Make();
  policy->Insert(Key(1));
  policy->Touch(Key(2));
  EXPECT_EQ(policy->size(), 1u);
  EXPECT_FALSE(policy->Contains(Key(2)));
  // Also after the key was tracked and evicted (some policies remember evicted keys).
  ASSERT_EQ(policy->PopVictim(), Key(1));
  policy->Touch(Key(1));
  EXPECT_EQ(policy->size(), 0u);
  EXPECT_FALSE(policy->Contains(Key(1)));
}

TEST_P(EvictionPolicyContractTest, EraseStopsTrackingAndIgnoresAbsentKeys) {
  auto policy = Make();
  policy->Insert(Key(1));
  policy->Insert(Key(2));
  policy->Erase(Key(3));
  EXPECT_EQ(policy->size(), 2u);
  policy->Erase(Key(1));
  EXPECT_EQ(policy->size(), 1u);
  EXPECT_FALSE(policy->Contains(Key(1)));
  EXPECT_EQ(policy->PopVictim(), Key(2));
  EXPECT_FALSE(policy->PopVictim().has_value());
}

TEST_P(EvictionPolicyContractTest, PopVictimReturnsEveryKeyOnceThenNothing) {
  auto policy = Make();
  std::set<BlockKey> inserted;
  for (uint64_t i = 1; i <= 20; ++i) {
    policy->Insert(Key(i));
    inserted.insert(Key(i));
    if (i % 3 == 0) policy->Touch(Key(i / 2));
  }
  std::set<BlockKey> popped;
  while (auto victim = policy->PopVictim()) {
    EXPECT_FALSE(policy->Contains(*victim));
    EXPECT_TRUE(popped.insert(*victim).second) << "victim returned twice";
  }
  EXPECT_EQ(popped, inserted);
  EXPECT_EQ(policy->size(), 0u);
}

TEST_P(EvictionPolicyContractTest, APutBackVictimIsTrackedAgain) {
  auto policy = Make();
  policy->Insert(Key(1));
  policy->Insert(Key(2));
  std::optional<BlockKey> victim = policy->PopVictim();
  ASSERT_TRUE(victim.has_value());
  policy->PutBack(*victim);
  EXPECT_TRUE(policy->Contains(*victim));
  EXPECT_EQ(policy->size(), 2u);
  policy->PutBack(*victim);  // tracked already: nothing changes
  EXPECT_EQ(policy->size(), 2u);
}

// A victim put back goes where new blocks go, so the others are asked first next time (Unpick
// of a block the store kept, and the next search of PickVictim, rely on it).
TEST_P(EvictionPolicyContractTest, APutBackVictimIsNotTheNextVictim) {
  auto policy = Make();
  for (uint64_t i = 1; i <= 3; ++i) policy->Insert(Key(i));
  std::optional<BlockKey> victim = policy->PopVictim();
  ASSERT_TRUE(victim.has_value());
  policy->PutBack(*victim);
  std::optional<BlockKey> next = policy->PopVictim();
  ASSERT_TRUE(next.has_value());
  EXPECT_NE(*next, *victim);
}

// Several victims popped, then all put back in another order: each is tracked once, and popping
// until empty returns every key exactly once.
TEST_P(EvictionPolicyContractTest, VictimsPutBackInAnyOrderAreEachTrackedOnce) {
  auto policy = Make(16);
  for (uint64_t i = 0; i < 16; ++i) policy->Insert(Key(i));
  std::vector<BlockKey> popped;
  for (int i = 0; i < 6; ++i) popped.push_back(*policy->PopVictim());
  for (size_t i = popped.size(); i-- > 0;) policy->PutBack(popped[i]);
  EXPECT_EQ(policy->size(), 16u);
  std::set<BlockKey> all;
  while (auto victim = policy->PopVictim()) EXPECT_TRUE(all.insert(*victim).second);
  EXPECT_EQ(all.size(), 16u);
}

// TouchRun is Touch of each key of the run, deepest first, absent keys ignored: both leave the
// same victim order.
TEST_P(EvictionPolicyContractTest, TouchRunIsTouchOfEachKeyDeepestFirst) {
  auto one_by_one = Make(64);
  auto by_run = Make(64);
  for (uint64_t n = 0; n < 48; ++n) {
    one_by_one->Insert(Key(n));
    by_run->Insert(Key(n));
  }
  std::vector<BlockKey> run;
  for (uint64_t n = 5; n < 30; n += 2) run.push_back(Key(n));
  run.push_back(Key(1000));  // not tracked
  run.push_back(Key(3));
  for (size_t i = run.size(); i-- > 0;) one_by_one->Touch(run[i]);
  by_run->TouchRun(run);
  by_run->TouchRun({});
  for (;;) {
    const std::optional<BlockKey> expected = one_by_one->PopVictim();
    ASSERT_EQ(by_run->PopVictim(), expected);
    if (!expected) break;
  }
}

// Random operations against a std::set model: membership and size always agree, and a victim is
// always a tracked key.
TEST_P(EvictionPolicyContractTest, RandomOperationsAgreeWithASetModel) {
  for (size_t capacity_hint : {size_t{0}, size_t{4}, size_t{64}}) {
    auto policy = Make(capacity_hint);
    std::set<BlockKey> model;
    std::mt19937_64 rng(capacity_hint + 1);
    for (int step = 0; step < 20000; ++step) {
      const BlockKey key = Key(rng() % 100);
      switch (rng() % 4) {
        case 0:
          if (!model.contains(key)) {
            policy->Insert(key);
            model.insert(key);
          }
          break;
        case 1:
          policy->Touch(key);
          break;
        case 2:
          policy->Erase(key);
          model.erase(key);
          break;
        case 3: {
          std::optional<BlockKey> victim = policy->PopVictim();
          ASSERT_EQ(victim.has_value(), !model.empty());
          if (victim) {
            ASSERT_EQ(model.erase(*victim), 1u);
          }
          break;
        }
      }
      ASSERT_EQ(policy->size(), model.size());
      ASSERT_EQ(policy->Contains(key), model.contains(key));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, EvictionPolicyContractTest,
                         ::testing::ValuesIn(EvictionPolicyNames()),
                         [](const auto& info) { return info.param; });

TEST(MakeEvictionPolicyTest, DefaultIsSticky) {
  EXPECT_EQ(EvictionPolicyNames().front(), "sticky");
  EXPECT_EQ(EvictionPolicyNames().front(), kDefaultEvictionPolicy);
}

TEST(MakeEvictionPolicyTest, UnknownNameListsTheKnownOnes) {
  auto policy = MakeEvictionPolicy("mru", 10);
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().code(), StatusCode::kInvalidArgument);
  for (const std::string& name : EvictionPolicyNames()) {
    EXPECT_NE(policy.status().message().find(name), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace kvtier::index
