#include "daemon/index/segmented_lists.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace kvtier::index {
namespace {

// Small keys ({0, n}), the worst case for a table hashed from the key bits.
BlockKey SmallKey(uint64_t n) { return BlockKey{{0, n}}; }

TEST(SegmentedListsTest, ListsKeepRecencyOrderPerSegment) {
  SegmentedLists<2> lists;
  const auto a = lists.Add(SmallKey(1), 0);
  const auto b = lists.Add(SmallKey(2), 0);
  lists.Add(SmallKey(3), 1);
  EXPECT_EQ(lists.Tail(0), a);
  lists.MoveToHead(a, 0);
  EXPECT_EQ(lists.Tail(0), b);
  lists.MoveToHead(b, 1);
  EXPECT_EQ(lists.Size(0), 1u);
  EXPECT_EQ(lists.Size(1), 2u);
  EXPECT_EQ(lists.SegmentOf(b), 1u);
  EXPECT_EQ(lists.KeyOf(lists.Tail(1)), SmallKey(3));
}

// The counter shares a word with a link: setting one leaves the other, and moves keep both.
TEST(SegmentedListsTest, CounterSurvivesMovesAndLinkChanges) {
  SegmentedLists<4> lists;
  const auto a = lists.Add(SmallKey(1), 3);
  EXPECT_EQ(lists.Counter(a), 0u);
  lists.SetCounter(a, 3);
  const auto b = lists.Add(SmallKey(2), 3);  // relinks a behind b
  lists.SetCounter(b, 2);
  EXPECT_EQ(lists.Counter(a), 3u);
  EXPECT_EQ(lists.Tail(3), a);
  lists.MoveToHead(a, 1);
  EXPECT_EQ(lists.Counter(a), 3u);
  EXPECT_EQ(lists.SegmentOf(a), 1u);
  EXPECT_EQ(lists.Counter(b), 2u);
  EXPECT_EQ(lists.Tail(3), b);
  lists.Remove(a);
  EXPECT_EQ(lists.Find(SmallKey(1)), lists.kNone);
  EXPECT_EQ(lists.Add(SmallKey(5), 0), a);  // the node is reused, its counter cleared
  EXPECT_EQ(lists.Counter(a), 0u);
}

// Random adds, moves and removals against a std::map: exercises table growth, probe runs that
// wrap around, backward-shift deletion inside runs and node reuse.
TEST(SegmentedListsTest, MatchesAMapModel) {
  SegmentedLists<3> lists;
  std::map<BlockKey, size_t> model;  // key -> segment
  std::map<BlockKey, uint8_t> counters;
  std::mt19937_64 rng(3);
  for (int step = 0; step < 200'000; ++step) {
    const BlockKey key = SmallKey(rng() % 3000);
    const auto node = lists.Find(key);
    const auto it = model.find(key);
    ASSERT_EQ(node != lists.kNone, it != model.end()) << "step " << step;
    const size_t segment = rng() % 3;
    if (it == model.end()) {
      if (rng() % 3 != 0) {
        lists.Add(key, segment);
        model.emplace(key, segment);
        counters[key] = 0;
      }
    } else if (rng() % 2 == 0) {
      ASSERT_EQ(lists.SegmentOf(node), it->second);
      ASSERT_EQ(lists.KeyOf(node), key);
      ASSERT_EQ(lists.Counter(node), counters[key]);
      lists.MoveToHead(node, segment);
      it->second = segment;
      counters[key] = static_cast<uint8_t>(rng() % 4);
      lists.SetCounter(node, counters[key]);
    } else {
      lists.Remove(node);
      model.erase(it);
    }
  }
  std::array<size_t, 3> sizes{};
  for (const auto& [key, segment] : model) ++sizes[segment];
  for (size_t s = 0; s < 3; ++s) EXPECT_EQ(lists.Size(s), sizes[s]);
  EXPECT_GT(model.size(), 1000u);
}

}  // namespace
}  // namespace kvtier::index
