#include "daemon/index/block_index.h"

#include <gtest/gtest.h>

#include <random>

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

TEST(BlockMetaTest, SameIncarnationNeedsEveryFieldAMoveDecidesFrom) {
  BlockMeta picked = Meta(TierId::kHost, 8192);
  picked.state = BlockState::kReady;
  picked.generation = 7;
  EXPECT_TRUE(picked.SameIncarnationAs(picked));
  // Fields a move does not decide from may change under it.
  BlockMeta now = picked;
  now.lease_count = 3;
  now.reads = 9;
  EXPECT_TRUE(now.SameIncarnationAs(picked));
  const auto changed = [&](auto change) {
    BlockMeta m = picked;
    change(m);
    return !m.SameIncarnationAs(picked);
  };
  EXPECT_TRUE(changed([](BlockMeta& m) { m.state = BlockState::kWriting; }));
  EXPECT_TRUE(changed([](BlockMeta& m) { m.generation = 8; }));
  EXPECT_TRUE(changed([](BlockMeta& m) { m.tier = TierId::kNvme; }));
  EXPECT_TRUE(changed([](BlockMeta& m) { m.extent.offset = 0; }));
  EXPECT_TRUE(changed([](BlockMeta& m) {
    m.has_shadow = true;
    m.shadow = {4096, 4096};
  }));
  picked.has_shadow = true;
  picked.shadow = {4096, 4096};
  EXPECT_TRUE(changed([](BlockMeta& m) { m.shadow.offset = 12288; }));
  // Without a shadow its stale extent means nothing.
  BlockMeta unshadowed = Meta(TierId::kHost, 8192);
  unshadowed.state = BlockState::kReady;
  BlockMeta stale = unshadowed;
  stale.shadow = {1, 1};
  EXPECT_TRUE(stale.SameIncarnationAs(unshadowed));
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

// A client looks [1 2] up (hit), then puts 3 and 4 in key order: they are more recent than the
// prefix they extend, so 2 would go first and strand them. Refresh of the chain puts it back in a
// lookup's order, tail first, and counts no read.
TEST(BlockIndexTest, RefreshPutsAChainExtendedAfterItsLookupBackInOrder) {
  for (const char* policy : {"lru", "sticky"}) {
    SCOPED_TRACE(policy);
    auto made = BlockIndex::Create({.shard_count = 4, .policy = policy});
    ASSERT_TRUE(made.ok());
    BlockIndex& index = **made;
    const std::vector<BlockKey> chain{Key(1), Key(2), Key(3), Key(4)};
    for (uint64_t k : {1, 2}) ASSERT_TRUE(index.InsertReady(Key(k), Meta()).ok());
    EXPECT_EQ(index.Lookup(chain, /*touch=*/true).ready_prefix, 2u);
    for (uint64_t k : {3, 4}) ASSERT_TRUE(index.InsertReady(Key(k), Meta()).ok());
    const uint8_t reads = index.Get(Key(1))->reads;
    EXPECT_EQ(index.Refresh(chain, std::nullopt), 4u);
    EXPECT_EQ(index.Get(Key(1))->reads, reads);
    for (uint64_t expected : {4, 3, 2, 1}) {
      auto victim = index.PickVictim(TierId::kHost, 0);
      ASSERT_TRUE(victim.has_value());
      EXPECT_EQ(victim->first, Key(expected));
      ASSERT_TRUE(index.Erase(victim->first).has_value());
    }
  }
}

TEST(BlockIndexTest, RefreshStopsAtTheFirstMissAndAtAnotherNamespace) {
  auto index = MakeIndex();
  const NamespaceId mine{{1, 1}};
  BlockMeta meta = Meta();
  meta.ns = mine;
  for (uint64_t k : {1, 2, 4}) ASSERT_TRUE(index->InsertReady(Key(k), meta).ok());
  EXPECT_EQ(index->Refresh(std::vector{Key(1), Key(2), Key(3), Key(4)}, mine), 2u);
  EXPECT_EQ(index->Refresh(std::vector{Key(1)}, NamespaceId{{2, 2}}), 0u);
}

TEST(BlockIndexTest, LeasedAndPinnedBlocksAreSkippedAndKept) {
  auto index = MakeIndex();
  for (uint64_t k : {1, 2, 3}) ASSERT_TRUE(index->InsertReady(Key(k), Meta()).ok());
  ASSERT_TRUE(index
                  ->Update(Key(1),
                           [](BlockMeta& m) {
                             ++m.lease_count;
                             return Status::Ok();
                           })
                  .ok());
  ASSERT_TRUE(index
                  ->Update(Key(2),
                           [](BlockMeta& m) {
                             m.pinned_until_us = 100;
                             return Status::Ok();
                           })
                  .ok());
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
  EXPECT_EQ(index->MoveTier(Key(1), older, TierId::kNvme, {0, 4096}).code(), StatusCode::kNotFound);
  ASSERT_TRUE(index->MoveTier(Key(1), *index->Get(Key(1)), TierId::kNvme, {0, 4096}).ok());
  EXPECT_EQ(index->TrackedBlocks(TierId::kHost), 0u);
  EXPECT_EQ(index->TrackedBlocks(TierId::kNvme), 1u);
  EXPECT_EQ(index->Get(Key(1))->tier, TierId::kNvme);
  ASSERT_TRUE(index
                  ->Update(Key(1),
                           [](BlockMeta& m) {
                             ++m.lease_count;
                             return Status::Ok();
                           })
                  .ok());
  EXPECT_EQ(index->MoveTier(Key(1), *index->Get(Key(1)), TierId::kHost, {0, 4096}).code(),
            StatusCode::kBusy);
}

// shadow_bytes follows every way an entry gains or loses its NVMe copy: a move that keeps the
// old extent, one between memory tiers, one into the copy, an update, an erase.
TEST(BlockIndexTest, ShadowBytesFollowTheCopiesOfEveryEntry) {
  auto index = MakeIndex();
  using Shadow = BlockIndex::ShadowAfterMove;
  ASSERT_TRUE(index->InsertReady(Key(1), Meta(TierId::kNvme, 0)).ok());
  ASSERT_TRUE(index->InsertReady(Key(2), Meta(TierId::kNvme, 4096)).ok());
  EXPECT_EQ(index->shadow_bytes(), 0u);
  // Read up: each keeps the NVMe extent it leaves as its copy.
  ASSERT_TRUE(
      index->MoveTier(Key(1), *index->Get(Key(1)), TierId::kHost, {0, 4096}, 0, Shadow::kOldExtent)
          .ok());
  ASSERT_TRUE(index
                  ->MoveTier(Key(2), *index->Get(Key(2)), TierId::kHost, {4096, 4096}, 0,
                             Shadow::kOldExtent)
                  .ok());
  EXPECT_EQ(index->shadow_bytes(), 8192u);
  // Up to the GPU and back: the copy stays right.
  ASSERT_TRUE(
      index->MoveTier(Key(1), *index->Get(Key(1)), TierId::kGpu, {0, 4096}, 0, Shadow::kKeep).ok());
  EXPECT_EQ(index->shadow_bytes(), 8192u);
  // Down into the copy: it is the block now, no longer a copy.
  const BlockMeta one = *index->Get(Key(1));
  ASSERT_TRUE(index->MoveTier(Key(1), one, TierId::kNvme, one.shadow).ok());
  EXPECT_EQ(index->shadow_bytes(), 4096u);
  // A copy attached by an update (a write-through), and one erased with its entry.
  ASSERT_TRUE(index->InsertReady(Key(3), Meta(TierId::kHost, 8192)).ok());
  ASSERT_TRUE(index
                  ->Update(Key(3),
                           [](BlockMeta& m) {
                             m.has_shadow = true;
                             m.shadow = {8192, 4096};
                             return Status::Ok();
                           })
                  .ok());
  EXPECT_EQ(index->shadow_bytes(), 8192u);
  ASSERT_TRUE(index->Erase(Key(2)).has_value());
  EXPECT_EQ(index->shadow_bytes(), 4096u);
  ASSERT_TRUE(index->EraseIf(Key(3), [](const BlockMeta&) { return true; }).has_value());
  EXPECT_EQ(index->shadow_bytes(), 0u);
  // An entry inserted with its copy (a warm restart's), and a move the index refuses.
  BlockMeta with_copy = Meta(TierId::kHost, 0);
  with_copy.has_shadow = true;
  with_copy.shadow = {12288, 4096};
  ASSERT_TRUE(index->InsertReady(Key(4), with_copy).ok());
  EXPECT_EQ(index->shadow_bytes(), 4096u);
  BlockMeta stale = *index->Get(Key(4));
  stale.generation = 7;
  EXPECT_EQ(index->MoveTier(Key(4), stale, TierId::kNvme, stale.shadow).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(index->shadow_bytes(), 4096u);
}

// entry_counts() and shadow_bytes() are kept as entries change; after every step of a random mix
// of the calls that change entries they equal a walk of the index.
TEST(BlockIndexTest, EntryCountsEqualAWalkOfTheIndex) {
  auto index = MakeIndex();
  using Shadow = BlockIndex::ShadowAfterMove;
  std::mt19937_64 rng(21);
  const TierId tiers[] = {TierId::kGpu, TierId::kHost, TierId::kNvme};
  for (int step = 0; step < 20'000; ++step) {
    const BlockKey key = Key(rng() % 200);
    const std::optional<BlockMeta> now = index->Get(key);
    BlockMeta meta = Meta(tiers[rng() % 3], (rng() % 64) * 4096);
    meta.has_shadow = rng() % 3 == 0;
    meta.shadow = {(rng() % 64) * 4096, 4096 * (1 + rng() % 3)};
    switch (rng() % 6) {
      case 0:
        (void)index->InsertWriting(key, meta);
        break;
      case 1:
        (void)index->InsertReady(key, meta);
        break;
      case 2:
        (void)index->MarkReady(key);
        break;
      case 3:
        (void)index->Update(key, [&](BlockMeta& m) {
          m.has_shadow = meta.has_shadow;
          m.shadow = meta.shadow;
          if (rng() % 8 == 0) m.state = BlockState::kWriting;  // refused, and undone
          return Status::Ok();
        });
        break;
      case 4:
        if (now) {
          (void)index->MoveTier(key, *now, meta.tier, meta.extent, 0,
                                static_cast<Shadow>(rng() % 3));
        }
        break;
      default:
        (void)index->Erase(key);
    }
    if (step % 100 != 0) continue;
    BlockIndex::EntryCounts walked;
    uint64_t shadow_bytes = 0;
    index->ForEach([&](const BlockKey&, const BlockMeta& m) {
      const bool ready = m.state == BlockState::kReady;
      walked.ready += ready ? 1 : 0;
      walked.writing += ready ? 0 : 1;
      walked.shadowed += ready && m.has_shadow ? 1 : 0;
      shadow_bytes += m.has_shadow ? m.shadow.length : 0;
    });
    const BlockIndex::EntryCounts counted = index->entry_counts();
    ASSERT_EQ(counted.ready, walked.ready) << "step " << step;
    ASSERT_EQ(counted.writing, walked.writing) << "step " << step;
    ASSERT_EQ(counted.shadowed, walked.shadowed) << "step " << step;
    ASSERT_EQ(index->shadow_bytes(), shadow_bytes) << "step " << step;
  }
  EXPECT_GT(index->entry_counts().ready, 20u);
  EXPECT_GT(index->entry_counts().writing, 20u);
  EXPECT_GT(index->entry_counts().shadowed, 5u);
}

// Copies are counted in the room they take on NVMe (the tier's footprint: a record header and
// rounding), not their payload.
TEST(BlockIndexTest, ShadowBytesCountTheRoomACopyTakes) {
  auto created = BlockIndex::Create(
      {.shard_count = 4, .policy = "lru", .shadow_footprint = [](uint64_t b) { return b + 4096; }});
  ASSERT_TRUE(created.ok());
  BlockIndex& index = **created;
  ASSERT_TRUE(index.InsertReady(Key(1), Meta(TierId::kNvme, 0)).ok());
  ASSERT_TRUE(index
                  .MoveTier(Key(1), *index.Get(Key(1)), TierId::kHost, {0, 4096}, 0,
                            BlockIndex::ShadowAfterMove::kOldExtent)
                  .ok());
  EXPECT_EQ(index.shadow_bytes(), 8192u);
  ASSERT_TRUE(index.Erase(Key(1)).has_value());
  EXPECT_EQ(index.shadow_bytes(), 0u);
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

// Keys whose high halves differ, so that a long lookup spreads over every shard (Key(n) keeps all
// keys in one shard).
BlockKey SpreadKey(uint64_t n) { return BlockKey{{(n + 1) * 0x9E3779B97F4A7C15ULL, n}}; }

std::vector<BlockKey> SpreadKeys(size_t count) {
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < count; ++i) keys.push_back(SpreadKey(i));
  return keys;
}

uint8_t ReadsOf(const BlockIndex& index, const BlockKey& key) { return index.Get(key)->reads; }

// Long lookups check their keys shard by shard in growing windows; the prefix must still end at
// the first miss wherever it falls (inside the first window, on a window's edge, in a later one),
// and only the blocks of the prefix may count as read.
TEST(BlockIndexTest, LongLookupStopsAtTheFirstMissAndCountsOnlyThePrefix) {
  const std::vector<BlockKey> keys = SpreadKeys(300);
  for (size_t miss : {0, 1, 15, 16, 17, 47, 48, 100, 299}) {
    auto index = MakeIndex(8);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i == miss) continue;
      ASSERT_TRUE(index->InsertReady(keys[i], Meta(TierId(i % 2))).ok());
    }
    LookupResult r = index->Lookup(keys, /*touch=*/true);
    EXPECT_EQ(r.ready_prefix, miss);
    ASSERT_EQ(r.tiers.size(), miss);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i == miss) continue;
      if (i < miss) {
        EXPECT_EQ(r.tiers[i], TierId(i % 2)) << i;
      }
      EXPECT_EQ(ReadsOf(*index, keys[i]), i < miss ? 1 : 0) << "miss " << miss;
    }
  }
}

TEST(BlockIndexTest, LongLookupSkipsWritingBlocksAndOtherNamespaces) {
  const std::vector<BlockKey> keys = SpreadKeys(100);
  const NamespaceId mine{{1, 1}};
  auto index = MakeIndex(8);
  for (size_t i = 0; i < keys.size(); ++i) {
    BlockMeta meta = Meta();
    meta.ns = i == 70 ? NamespaceId{{2, 2}} : mine;
    if (i == 40) {
      ASSERT_TRUE(index->InsertWriting(keys[i], meta).ok());
    } else {
      ASSERT_TRUE(index->InsertReady(keys[i], meta).ok());
    }
  }
  EXPECT_EQ(index->Lookup(keys, false).ready_prefix, 40u);
  ASSERT_TRUE(index->MarkReady(keys[40]).ok());
  EXPECT_EQ(index->Lookup(keys, false).ready_prefix, 100u);
  EXPECT_EQ(index->Lookup(keys, false, mine).ready_prefix, 70u);
}

TEST(BlockIndexTest, LongTouchedPrefixLosesItsTailFirst) {
  const std::vector<BlockKey> keys = SpreadKeys(200);
  auto index = MakeIndex(8);
  // Inserted in reverse, so the lookup's touch must reorder them all.
  for (size_t i = keys.size(); i-- > 0;) ASSERT_TRUE(index->InsertReady(keys[i], Meta()).ok());
  ASSERT_EQ(index->Lookup(keys, true).ready_prefix, keys.size());
  for (size_t i = keys.size(); i-- > 0;) {
    auto victim = index->PickVictim(TierId::kHost, 0);
    ASSERT_TRUE(victim.has_value());
    EXPECT_EQ(victim->first, keys[i]);
    ASSERT_TRUE(index->Erase(victim->first).has_value());
  }
}

TEST(BlockIndexTest, EachTierMayHaveItsOwnPolicy) {
  BlockIndex::Options options{.shard_count = 4, .policy = "lru"};
  options.tier_policies[static_cast<size_t>(TierId::kNvme)] = "s3fifo";
  auto index = BlockIndex::Create(options);
  ASSERT_TRUE(index.ok());
  EXPECT_EQ((*index)->policy_name(TierId::kHost), "lru");
  EXPECT_EQ((*index)->policy_name(TierId::kGpu), "lru");
  EXPECT_EQ((*index)->policy_name(TierId::kNvme), "s3fifo");
  options.tier_policies[static_cast<size_t>(TierId::kGpu)] = "nope";
  EXPECT_EQ(BlockIndex::Create(options).status().code(), StatusCode::kInvalidArgument);
}

TEST(BlockIndexTest, RejectsBadOptions) {
  EXPECT_EQ(BlockIndex::Create({.shard_count = 0}).status().code(), StatusCode::kInvalidArgument);
  auto bad = BlockIndex::Create({.shard_count = 1, .policy = "nope"});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("lru"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::index
