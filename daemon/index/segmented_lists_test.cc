#include "daemon/index/segmented_lists.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

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

// Keys of `segment` from the least recent to the most, read from a copy (the lists have no
// walk of their own).
template <size_t kSegments>
std::vector<BlockKey> Order(SegmentedLists<kSegments> lists, size_t segment) {
  std::vector<BlockKey> keys;
  while (lists.Tail(segment) != lists.kNone) {
    keys.push_back(lists.KeyOf(lists.Tail(segment)));
    lists.Remove(lists.Tail(segment));
  }
  return keys;
}

// FindRun and MoveRunToHead against Find and MoveToHead key by key, the deepest first, on runs
// that are mostly stretches used before (what they speed up), with keys that are absent, in the
// other segment, or repeated mixed in; the same adds, moves and removals happen to both lists.
TEST(SegmentedListsTest, ARunMovedAtOnceEndsAsMovedKeyByKey) {
  SegmentedLists<2> by_key, by_run;
  std::mt19937_64 rng(9);
  constexpr uint64_t kKeys = 300;
  for (uint64_t k = 0; k < kKeys; ++k) {
    const size_t segment = rng() % 8 == 0 ? 1 : 0;
    ASSERT_EQ(by_key.Add(SmallKey(k), segment), by_run.Add(SmallKey(k), segment));
  }
  std::vector<SegmentedLists<2>::Node> nodes;
  for (int step = 0; step < 20'000; ++step) {
    std::vector<BlockKey> run;
    const uint64_t start = rng() % kKeys;
    const size_t length = 1 + rng() % 48;
    for (size_t i = 0; i < length; ++i) {
      switch (rng() % 16) {
        case 0:
          run.push_back(SmallKey(kKeys + rng() % 50));  // never added
          break;
        case 1:
          run.push_back(SmallKey(rng() % kKeys));  // anywhere, a repeat at times
          break;
        default:
          run.push_back(SmallKey((start + i) % kKeys));
      }
    }
    if (rng() % 8 == 0) std::reverse(run.begin(), run.end());
    for (size_t i = run.size(); i-- > 0;) {
      const auto node = by_key.Find(run[i]);
      if (node != by_key.kNone && by_key.SegmentOf(node) == 0) by_key.MoveToHead(node, 0);
    }
    by_run.FindRun(run, 0, nodes);
    for (size_t i = 0; i < run.size(); ++i) {
      const auto node = by_run.Find(run[i]);
      ASSERT_EQ(nodes[i], node != by_run.kNone && by_run.SegmentOf(node) == 0 ? node : by_run.kNone)
          << "step " << step << " key " << i;
    }
    by_run.MoveRunToHead(nodes, 0);
    // Now and then a key changes segment, or leaves and comes back (at the head, at a new node).
    const BlockKey other = SmallKey(rng() % kKeys);
    if (const auto node = by_key.Find(other); rng() % 4 == 0) {
      const size_t segment = rng() % 2;
      by_key.MoveToHead(node, segment);
      by_run.MoveToHead(node, segment);
      by_key.SetCounter(node, static_cast<uint8_t>(step % 4));
      by_run.SetCounter(node, static_cast<uint8_t>(step % 4));
    } else if (rng() % 8 == 0) {
      by_key.Remove(node);
      by_run.Remove(node);
      ASSERT_EQ(by_key.Add(other, 0), by_run.Add(other, 0));
    }
    if (step % 500 == 0) {
      ASSERT_EQ(Order(by_key, 0), Order(by_run, 0)) << "step " << step;
      ASSERT_EQ(Order(by_key, 1), Order(by_run, 1)) << "step " << step;
    }
  }
  EXPECT_EQ(Order(by_key, 0), Order(by_run, 0));
  EXPECT_EQ(Order(by_key, 1), Order(by_run, 1));
  for (uint64_t k = 0; k < kKeys; ++k) {
    const auto node = by_run.Find(SmallKey(k));
    ASSERT_EQ(by_run.Counter(node), by_key.Counter(node)) << "key " << k;
    ASSERT_EQ(by_run.SegmentOf(node), by_key.SegmentOf(node)) << "key " << k;
  }
}

}  // namespace
}  // namespace kvtier::index
