#include "daemon/index/block_index.h"

#include <gtest/gtest.h>

namespace kvtier::index {
namespace {

BlockKey Key(uint64_t n) { return BlockKey{{0, n}}; }

BlockMeta Meta(TierId tier = TierId::kHost, uint64_t offset = 0) {
  BlockMeta meta;
  meta.tier = tier;
  meta.extent = {offset, 4096};
  return meta;
}

std::unique_ptr<BlockIndex> MakeIndex(size_t shards = 4) {
  auto index = BlockIndex::Create({.shard_count = shards, .policy = "lru"});
  EXPECT_TRUE(index.ok());
  return std::move(index).value();
}

TEST(BlockIndexTest, WritingBlocksAreInvisibleUntilReady) {
  auto index = MakeIndex();
  ASSERT_TRUE(index->InsertWriting(Key(1), Meta()).ok());
  EXPECT_EQ(index->Lookup(std::vector{Key(1)}, false).ready_prefix, 0u);
  EXPECT_EQ(index->InsertWriting(Key(1), Meta()).code(), StatusCode::kBusy);
  ASSERT_TRUE(index->MarkReady(Key(1)).ok());
  EXPECT_EQ(index->Lookup(std::vector{Key(1)}, false).ready_prefix, 1u);
  EXPECT_EQ(index->InsertWriting(Key(1), Meta()).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(index->MarkReady(Key(1)).code(), StatusCode::kInvalidArgument);
}

TEST(BlockIndexTest, LookupCountsOnlyTheLeadingReadyKeys) {
  auto index = MakeIndex();
  for (uint64_t k : {1, 2, 4}) ASSERT_TRUE(index->InsertReady(Key(k), Meta()).ok());
  ASSERT_TRUE(index->InsertReady(Key(5), Meta(TierId::kNvme)).ok());
  LookupResult r = index->Lookup(std::vector{Key(1), Key(2), Key(3), Key(4)}, false);
  EXPECT_EQ(r.ready_prefix, 2u);
  EXPECT_EQ(r.tiers, (std::vector{TierId::kHost, TierId::kHost}));
  r = index->Lookup(std::vector{Key(4), Key(5)}, false);
  EXPECT_EQ(r.tiers, (std::vector{TierId::kHost, TierId::kNvme}));
  EXPECT_EQ(index->Lookup(std::vector{Key(9), Key(1)}, false).ready_prefix, 0u);
}

TEST(BlockIndexTest, TouchedPrefixLosesItsTailFirst) {
  auto index = MakeIndex();
  // Inserted 1, 2, 3 (3 most recent); a lookup of the chain 1,2,3 makes 1 the most recent and 3
  // the least, so eviction takes the tail of the prefix first.
  for (uint64_t k : {1, 2, 3}) ASSERT_TRUE(index->InsertReady(Key(k), Meta()).ok());
  index->Lookup(std::vector{Key(1), Key(2), Key(3)}, true);
  for (uint64_t expected : {3, 2, 1}) {
    auto victim = index->PickVictim(TierId::kHost, 0);
    ASSERT_TRUE(victim.has_value());
    EXPECT_EQ(victim->first, Key(expected));
    ASSERT_TRUE(index->Erase(victim->first).has_value());
  }
  EXPECT_FALSE(index->PickVictim(TierId::kHost, 0).has_value());
}

TEST(BlockIndexTest, LeasedAndPinnedBlocksAreSkippedAndKept) {
  auto index = MakeIndex();
  for (uint64_t k : {1, 2, 3}) ASSERT_TRUE(index->InsertReady(Key(k), Meta()).ok());
  ASSERT_TRUE(index->Update(Key(1), [](BlockMeta& m) {
    ++m.lease_count;
    return Status::Ok();
  }).ok());
  ASSERT_TRUE(index->Update(Key(2), [](BlockMeta& m) {
    m.pinned_until_us = 100;
    return Status::Ok();
  }).ok());
  auto victim = index->PickVictim(TierId::kHost, 50);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(victim->first, Key(3));
  ASSERT_TRUE(index->Erase(Key(3)).has_value());
  // Only a leased and a pinned block remain: nothing can go, and both stay tracked.
  EXPECT_FALSE(index->PickVictim(TierId::kHost, 50).has_value());
  EXPECT_EQ(index->TrackedBlocks(TierId::kHost), 2u);
  // Once the pin has expired, block 2 can go.
  victim = index->PickVictim(TierId::kHost, 100);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(victim->first, Key(2));
}

TEST(BlockIndexTest, UnpickReturnsAVictimToItsPolicy) {
  auto index = MakeIndex();
  ASSERT_TRUE(index->InsertReady(Key(1), Meta()).ok());
  auto victim = index->PickVictim(TierId::kHost, 0);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(index->TrackedBlocks(TierId::kHost), 0u);
  index->Unpick(Key(1));
  EXPECT_EQ(index->TrackedBlocks(TierId::kHost), 1u);
}

TEST(BlockIndexTest, MoveTierFollowsPoliciesAndRefusesLeasedOrChangedBlocks) {
  auto index = MakeIndex();
  ASSERT_TRUE(index->InsertReady(Key(1), Meta(TierId::kHost, 8192)).ok());
  // The bytes were copied from another extent than the block now has: refused.
  BlockMeta elsewhere = Meta(TierId::kHost, 0);
  EXPECT_EQ(index->MoveTier(Key(1), elsewhere, TierId::kNvme, {0, 4096}).code(),
            StatusCode::kNotFound);
  // Same place, another incarnation (removed and stored again): refused as well.
  BlockMeta older = Meta(TierId::kHost, 8192);
  older.generation = 99;
  EXPECT_EQ(index->MoveTier(Key(1), older, TierId::kNvme, {0, 4096}).code(),
            StatusCode::kNotFound);
  ASSERT_TRUE(index->MoveTier(Key(1), *index->Get(Key(1)), TierId::kNvme, {0, 4096}).ok());
  EXPECT_EQ(index->TrackedBlocks(TierId::kHost), 0u);
  EXPECT_EQ(index->TrackedBlocks(TierId::kNvme), 1u);
  EXPECT_EQ(index->Get(Key(1))->tier, TierId::kNvme);
  ASSERT_TRUE(index->Update(Key(1), [](BlockMeta& m) {
    ++m.lease_count;
    return Status::Ok();
  }).ok());
  EXPECT_EQ(index->MoveTier(Key(1), *index->Get(Key(1)), TierId::kHost, {0, 4096}).code(),
            StatusCode::kBusy);
}

TEST(BlockIndexTest, UpdateMayNotChangeTierOrState) {
  auto index = MakeIndex();
  ASSERT_TRUE(index->InsertReady(Key(1), Meta()).ok());
  Status st = index->Update(Key(1), [](BlockMeta& m) {
    m.tier = TierId::kGpu;
    return Status::Ok();
  });
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_EQ(index->Get(Key(1))->tier, TierId::kHost);
  EXPECT_EQ(index->Update(Key(7), [](BlockMeta&) { return Status::Ok(); }).code(),
            StatusCode::kNotFound);
}

TEST(BlockIndexTest, EraseWorksInAnyStateAndKeysOfNamespaceFindsThem) {
  auto index = MakeIndex();
  BlockMeta a = Meta();
  a.ns = NamespaceId{{1, 1}};
  BlockMeta b = Meta();
  b.ns = NamespaceId{{2, 2}};
  ASSERT_TRUE(index->InsertReady(Key(1), a).ok());
  ASSERT_TRUE(index->InsertWriting(Key(2), a).ok());
  ASSERT_TRUE(index->InsertReady(Key(3), b).ok());
  auto keys = index->KeysOfNamespace(a.ns);
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_TRUE(index->Erase(Key(2)).has_value());
  EXPECT_TRUE(index->Erase(Key(1)).has_value());
  EXPECT_FALSE(index->Erase(Key(1)).has_value());
  EXPECT_EQ(index->size(), 1u);
  EXPECT_EQ(index->TrackedBlocks(TierId::kHost), 1u);
}

TEST(BlockIndexTest, RejectsBadOptions) {
  EXPECT_EQ(BlockIndex::Create({.shard_count = 0}).status().code(), StatusCode::kInvalidArgument);
  auto bad = BlockIndex::Create({.shard_count = 1, .policy = "nope"});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("lru"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::index
