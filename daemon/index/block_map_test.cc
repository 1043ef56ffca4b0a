#include "daemon/index/block_map.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace kvtier::index {
namespace {

BlockMeta MetaWithGeneration(uint64_t generation) {
  BlockMeta meta;
  meta.generation = generation;
  meta.extent = {generation * 4096, 4096};
  return meta;
}

// Checks `map` against `reference`: same size, every reference key found with its metadata, and
// a scan that meets every entry exactly once.
void ExpectSameContents(const BlockMap& map, const std::map<BlockKey, uint64_t>& reference) {
  ASSERT_EQ(map.size(), reference.size());
  for (const auto& [key, generation] : reference) {
    const BlockMeta* meta = map.Find(key);
    ASSERT_NE(meta, nullptr);
    EXPECT_EQ(meta->generation, generation);
    EXPECT_EQ(meta->extent.offset, generation * 4096);
  }
  std::map<BlockKey, uint64_t> scanned;
  for (const auto& [key, meta] : map) {
    EXPECT_TRUE(scanned.emplace(key, meta.generation).second) << "scanned twice";
  }
  EXPECT_EQ(scanned, reference);
}

TEST(BlockMapTest, FindsWhatWasAddedAndNothingElse) {
  BlockMap map;
  EXPECT_EQ(map.Find(BlockKey{{1, 2}}), nullptr);
  auto [meta, added] = map.TryEmplace(BlockKey{{1, 2}}, MetaWithGeneration(7));
  ASSERT_TRUE(added);
  EXPECT_EQ(meta->generation, 7u);
  meta->reads = 3;  // changed in place
  auto [again, added_again] = map.TryEmplace(BlockKey{{1, 2}}, MetaWithGeneration(8));
  EXPECT_FALSE(added_again);
  EXPECT_EQ(again->generation, 7u) << "TryEmplace keeps what is there";
  EXPECT_EQ(map.Find(BlockKey{{1, 2}})->reads, 3);
  EXPECT_EQ(map.Find(BlockKey{{2, 1}}), nullptr);
  EXPECT_FALSE(map.Erase(BlockKey{{2, 1}}));
  EXPECT_TRUE(map.Erase(BlockKey{{1, 2}}));
  EXPECT_EQ(map.Find(BlockKey{{1, 2}}), nullptr);
  EXPECT_EQ(map.size(), 0u);
}

TEST(BlockMapTest, EraseIfRemovesOnlyWhatThePredicateAcceptsAndReturnsIt) {
  BlockMap map;
  for (uint64_t n = 1; n <= 100; ++n) map.TryEmplace(BlockKey{{n, n}}, MetaWithGeneration(n));
  const auto even = [](const BlockMeta& meta) { return meta.generation % 2 == 0; };
  EXPECT_FALSE(map.EraseIf(BlockKey{{7, 7}}, even)) << "kept: the predicate refused it";
  EXPECT_FALSE(map.EraseIf(BlockKey{{7, 8}}, even)) << "absent";
  const std::optional<BlockMeta> erased = map.EraseIf(BlockKey{{8, 8}}, even);
  ASSERT_TRUE(erased);
  EXPECT_EQ(erased->generation, 8u);
  EXPECT_EQ(map.Find(BlockKey{{8, 8}}), nullptr);
  std::map<BlockKey, uint64_t> reference;
  for (uint64_t n = 1; n <= 100; ++n) {
    if (n != 8) reference.emplace(BlockKey{{n, n}}, n);
  }
  ExpectSameContents(map, reference);
}

TEST(BlockMapTest, AScanChangesMetadataInPlace) {
  BlockMap map;
  for (uint64_t n = 1; n <= 70; ++n) map.TryEmplace(BlockKey{{n, 0}}, MetaWithGeneration(n));
  for (auto [key, meta] : map) meta.reads = static_cast<uint8_t>(key.high);
  for (uint64_t n = 1; n <= 70; ++n) EXPECT_EQ(map.Find(BlockKey{{n, 0}})->reads, n);
}

// Random adds and erases against std::map, with random keys and with small keys ({0, n}: the
// worst case for a table hashed from the key bits), through growth, shrinking below a chunk and
// growing again: erase moves the last entry into the hole and renumbers its slot, so any slip
// shows up as a lost or misattributed entry.
TEST(BlockMapTest, MatchesAReferenceMapThroughAddsAndErases) {
  for (const bool small_keys : {false, true}) {
    SCOPED_TRACE(small_keys ? "small keys" : "random keys");
    BlockMap map;
    std::map<BlockKey, uint64_t> reference;
    std::mt19937_64 rng(small_keys ? 3 : 4);
    const auto key_for = [&](uint64_t n) {
      return small_keys ? BlockKey{{0, n}} : BlockKey{{n * 0x9E3779B97F4A7C15ULL, ~n}};
    };
    uint64_t generation = 0;
    for (int phase = 0; phase < 3; ++phase) {
      const size_t target = phase == 1 ? 10 : 3000;  // fill, drain below a chunk, refill
      for (int step = 0; step < 20000; ++step) {
        const BlockKey key = key_for(rng() % 5000);
        const bool add = reference.size() < target ? rng() % 4 != 0 : rng() % 4 == 0;
        if (add) {
          const auto [meta, added] = map.TryEmplace(key, MetaWithGeneration(++generation));
          EXPECT_EQ(added, reference.emplace(key, generation).second);
          EXPECT_EQ(meta->generation, reference.at(key));
        } else {
          EXPECT_EQ(map.Erase(key), reference.erase(key) == 1);
        }
      }
      ExpectSameContents(map, reference);
    }
  }
}

}  // namespace
}  // namespace kvtier::index
