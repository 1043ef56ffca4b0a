#include "daemon/index/lru_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>

namespace kvtier::index {
namespace {

// Small keys ({0, n}) as the index tests use, and hash-like ones.
BlockKey SmallKey(uint64_t n) { return BlockKey{{0, n}}; }
BlockKey HashKey(uint64_t n) { return BlockKey{{n * 0x9E3779B97F4A7C15ULL, ~n}}; }

TEST(LruPolicyTest, EvictsLeastRecentlyUsedFirst) {
  LruPolicy lru;
  for (uint64_t i = 1; i <= 4; ++i) lru.Insert(SmallKey(i));
  lru.Touch(SmallKey(1));
  lru.Touch(SmallKey(3));
  for (uint64_t expected : {2, 4, 1, 3}) EXPECT_EQ(lru.PopVictim(), SmallKey(expected));
  EXPECT_FALSE(lru.PopVictim().has_value());
}

TEST(LruPolicyTest, InsertOfTrackedKeyKeepsOneEntry) {
  LruPolicy lru;
  lru.Insert(SmallKey(1));
  lru.Insert(SmallKey(2));
  lru.Insert(SmallKey(1));
  EXPECT_EQ(lru.size(), 2u);
  EXPECT_EQ(lru.PopVictim(), SmallKey(2));
  EXPECT_EQ(lru.PopVictim(), SmallKey(1));
}

// The table is open addressing with backward-shift deletion and grows by rehashing: a long random
// mix of operations, checked step by step against a plain list, exercises wrap-around probe runs,
// deletions inside runs, growth and node reuse.
void CheckAgainstModel(BlockKey (*make_key)(uint64_t), uint64_t key_space) {
  LruPolicy lru;
  std::list<BlockKey> model;  // front: most recent
  std::mt19937_64 rng(42);
  size_t max_size = 0;
  for (int step = 0; step < 200'000; ++step) {
    const BlockKey key = make_key(rng() % key_space);
    const auto it = std::find(model.begin(), model.end(), key);
    const bool tracked = it != model.end();
    ASSERT_EQ(lru.Contains(key), tracked) << "step " << step;
    // Inserts outweigh removals so that about half the key space is tracked and the table grows.
    const uint64_t op = rng() % 20;
    if (op < 8) {
      if (!tracked) {
        lru.Insert(key);
        model.push_front(key);
      }
    } else if (op < 14) {
      lru.Touch(key);
      if (tracked) model.splice(model.begin(), model, it);
    } else if (op < 17) {
      lru.Erase(key);
      if (tracked) model.erase(it);
    } else {
      {
        const std::optional<BlockKey> victim = lru.PopVictim();
        ASSERT_EQ(victim.has_value(), !model.empty()) << "step " << step;
        if (victim) {
          ASSERT_EQ(*victim, model.back()) << "step " << step;
          model.pop_back();
        }
      }
    }
    max_size = std::max(max_size, model.size());
    ASSERT_EQ(lru.size(), model.size()) << "step " << step;
  }
  EXPECT_GT(max_size, key_space / 3);
}

TEST(LruPolicyTest, MatchesAListModelWithSmallKeys) { CheckAgainstModel(SmallKey, 300); }
TEST(LruPolicyTest, MatchesAListModelWithHashKeys) { CheckAgainstModel(HashKey, 300); }

}  // namespace
}  // namespace kvtier::index
