#include "daemon/store/store.h"

#include <gtest/gtest.h>

#include <functional>

#include "daemon/store/store_test_fixture.h"
#include "tiers/host/host_tier.h"

namespace kvtier::store {
namespace {

using testing::FakeTier;
using testing::kBlock;
using testing::Key;
using testing::kNs;
using testing::kOtherNs;
using testing::Payload;
using testing::StoreTest;

TEST_F(StoreTest, PutThenGetReturnsTheSameBytes) {
  Build({8});
  ASSERT_TRUE(PutBlock(1).ok());
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());
  EXPECT_EQ(out, Payload(1));
  EXPECT_EQ(store_->Get(kNs, Key(2), out).code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, AReservedBlockIsInvisibleUntilCommitted) {
  Build({8});
  auto r = store_->BeginPut(kNs, Key(1), kBlock);
  ASSERT_TRUE(r.ok());
  ASSERT_NE(r->address, nullptr);
  EXPECT_FALSE(Cached(1));
  std::vector<std::byte> out;
  EXPECT_EQ(store_->Get(kNs, Key(1), out).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->BeginPut(kNs, Key(1), kBlock).status().code(), StatusCode::kBusy);
  std::vector<std::byte> bytes = Payload(1);
  std::memcpy(r->address, bytes.data(), kBlock);
  ASSERT_TRUE(store_->CommitPut(r->id, 77).ok());
  EXPECT_TRUE(Cached(1));
  EXPECT_EQ(store_->BeginPut(kNs, Key(1), kBlock).status().code(), StatusCode::kAlreadyExists);
  auto lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  EXPECT_TRUE(lease->has_checksum);
  EXPECT_EQ(lease->checksum, 77u);
  EXPECT_TRUE(store_->Release(lease->id).ok());
  EXPECT_EQ(store_->CommitPut(r->id).code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, CommitPutAsPublishesAReservationUnderAnotherKey) {
  Build({8});
  ASSERT_TRUE(PutBlock(2).ok());
  auto r = store_->BeginPut(kNs, Key(100), kBlock);  // Key(100): a placeholder
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(store_->RenewReservation(r->id));
  std::vector<std::byte> bytes = Payload(9);
  std::memcpy(r->address, bytes.data(), kBlock);
  // The target key holds a block: the reservation stays for a retry once it is removed.
  EXPECT_EQ(store_->CommitPutAs(r->id, Key(2)).code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(store_->RenewReservation(r->id));
  ASSERT_TRUE(store_->Remove(kNs, Key(2)).ok());
  ASSERT_TRUE(store_->CommitPutAs(r->id, Key(2), 55).ok());
  EXPECT_FALSE(store_->RenewReservation(r->id));
  EXPECT_FALSE(Cached(100));
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(2), out).ok());
  EXPECT_EQ(out, bytes);
  auto lease = store_->Acquire(kNs, Key(2));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->checksum, 55u);
  ASSERT_TRUE(store_->Release(lease->id).ok());
  EXPECT_EQ(store_->CommitPutAs(r->id, Key(3)).code(), StatusCode::kNotFound);
  // The placeholder key is free again.
  EXPECT_TRUE(PutBlock(100).ok());
}

TEST_F(StoreTest, ARenewedReservationOutlivesItsFirstDeadline) {
  Build({2});
  auto r = store_->BeginPut(kNs, Key(1), kBlock);
  ASSERT_TRUE(r.ok());
  clock_.AdvanceMicros(1'500'000);  // three quarters of the reservation timeout
  ASSERT_TRUE(store_->RenewReservation(r->id));
  clock_.AdvanceMicros(1'500'000);  // past the first deadline, not the renewed one
  EXPECT_EQ(store_->ExpireDeadlines(), 0u);
  std::memcpy(r->address, Payload(1).data(), kBlock);
  ASSERT_TRUE(store_->CommitPut(r->id).ok());
  EXPECT_TRUE(Cached(1));
  EXPECT_FALSE(store_->RenewReservation(r->id));  // committed: nothing to renew
}

TEST_F(StoreTest, CommitPutAsOfATimedOutReservationGivesItsSpaceBack) {
  Build({1});
  auto r = store_->BeginPut(kNs, Key(100), kBlock);
  ASSERT_TRUE(r.ok());
  clock_.AdvanceMicros(2'000'000);
  EXPECT_EQ(store_->ExpireDeadlines(), 1u);
  EXPECT_FALSE(store_->RenewReservation(r->id));
  EXPECT_EQ(store_->CommitPutAs(r->id, Key(1)).code(), StatusCode::kNotFound);
  EXPECT_FALSE(Cached(1));
  EXPECT_EQ(store_->Stats().blocks_quarantined, 0u);
  EXPECT_TRUE(PutBlock(1).ok());  // the only slot is usable again
}

TEST_F(StoreTest, AbortGivesTheSpaceBack) {
  Build({1});
  auto r = store_->BeginPut(kNs, Key(1), kBlock);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(store_->BeginPut(kNs, Key(2), kBlock).status().code(), StatusCode::kBusy);
  ASSERT_TRUE(store_->AbortPut(r->id).ok());
  EXPECT_FALSE(Cached(1));
  EXPECT_TRUE(PutBlock(2).ok());
  EXPECT_EQ(store_->AbortPut(r->id).code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, BadPutsAreRejectedWithTheirReason) {
  Build({4});
  EXPECT_EQ(store_->BeginPut(kOtherNs, Key(1), kBlock).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->BeginPut(kNs, Key(1), kBlock + 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginPut(kNs, Key(1), 0).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_->RegisterNamespace({kOtherNs, 0, 0, "any size"}).ok());
  EXPECT_EQ(store_->BeginPut(kOtherNs, Key(1), 5 * kBlock).status().code(), StatusCode::kRejected);
  EXPECT_EQ(store_->RegisterNamespace({kNs, 16, 2 * kBlock, "conflict"}).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, FullTierEvictsTheLeastRecentlyUsedBlock) {
  Build({3});
  for (uint64_t n : {1, 2, 3}) ASSERT_TRUE(PutBlock(n).ok());
  EXPECT_TRUE(Cached(1));  // 1 becomes the most recent; 2 is now the oldest
  ASSERT_TRUE(PutBlock(4).ok());
  EXPECT_FALSE(Cached(2));
  for (uint64_t n : {1, 3, 4}) EXPECT_TRUE(Cached(n)) << n;
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.evicted_blocks, 1u);
  EXPECT_EQ(s.tiers[0].evictions, 1u);
}

TEST_F(StoreTest, LeasedBlocksStayAndAFullTierAnswersBusy) {
  Build({2});
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  auto l1 = store_->Acquire(kNs, Key(1));
  auto l2 = store_->Acquire(kNs, Key(2));
  ASSERT_TRUE(l1.ok() && l2.ok());
  EXPECT_EQ(PutBlock(3).code(), StatusCode::kBusy);
  EXPECT_EQ(store_->Stats().busy_puts, 1u);
  // Reads keep working while puts are refused.
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());
  EXPECT_EQ(out, Payload(1));
  EXPECT_EQ(store_->Remove(kNs, Key(2)).code(), StatusCode::kBusy);
  ASSERT_TRUE(store_->Release(l2->id).ok());
  ASSERT_TRUE(PutBlock(3).ok());
  EXPECT_FALSE(Cached(2));
  EXPECT_TRUE(Cached(1));
  ASSERT_TRUE(store_->Release(l1->id).ok());
  EXPECT_EQ(store_->Release(l1->id).code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, LeasesAndReservationsTimeOut) {
  Build({2});
  ASSERT_TRUE(PutBlock(1).ok());
  auto lease = store_->Acquire(kNs, Key(1));
  auto reservation = store_->BeginPut(kNs, Key(2), kBlock);
  ASSERT_TRUE(lease.ok() && reservation.ok());
  EXPECT_EQ(store_->ExpireDeadlines(), 0u);
  clock_.AdvanceMicros(1'000'000);  // the lease deadline
  EXPECT_EQ(store_->ExpireDeadlines(), 1u);
  EXPECT_EQ(store_->Release(lease->id).code(), StatusCode::kNotFound);
  clock_.AdvanceMicros(1'000'000);  // the reservation deadline
  EXPECT_EQ(store_->ExpireDeadlines(), 1u);
  EXPECT_FALSE(Cached(2));
  // The timed-out writer's space is held until it reports back, so it cannot hit another block.
  EXPECT_EQ(store_->Stats().blocks_quarantined, 1u);
  EXPECT_EQ(store_->CommitPut(reservation->id).code(), StatusCode::kNotFound);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.blocks_quarantined, 0u);
  EXPECT_EQ(s.expired_leases, 1u);
  EXPECT_EQ(s.expired_reservations, 1u);
  EXPECT_EQ(s.leases_active, 0u);
  // Both blocks' room is usable again: 1 is evictable, 2's slot was freed.
  EXPECT_TRUE(PutBlock(3).ok());
  EXPECT_TRUE(PutBlock(4).ok());
}

TEST_F(StoreTest, RenewedLeaseOutlivesItsFirstDeadlineButNotALapse) {
  Build({2});
  ASSERT_TRUE(PutBlock(1).ok());
  auto lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  clock_.AdvanceMicros(900'000);
  ASSERT_TRUE(store_->Renew(lease->id).ok());
  clock_.AdvanceMicros(900'000);  // past the first deadline, not the renewed one
  EXPECT_EQ(store_->ExpireDeadlines(), 0u);
  EXPECT_EQ(store_->Remove(kNs, Key(1)).code(), StatusCode::kBusy);
  clock_.AdvanceMicros(200'000);
  EXPECT_EQ(store_->ExpireDeadlines(), 1u);
  // Too late: the holder learns that its reads since the last renewal are not to be trusted.
  EXPECT_EQ(store_->Renew(lease->id).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Release(lease->id).code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, PinnedBlocksSurviveUntilTheirTtl) {
  Build({2});
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  ASSERT_TRUE(store_->Pin(kNs, Key(1), 5'000'000).ok());
  ASSERT_TRUE(PutBlock(3).ok());  // evicts 2, not the older but pinned 1
  EXPECT_TRUE(Cached(1));
  EXPECT_FALSE(Cached(2));
  clock_.AdvanceMicros(5'000'000);
  EXPECT_TRUE(Cached(3));  // 3 is now more recent than 1
  ASSERT_TRUE(PutBlock(4).ok());
  EXPECT_FALSE(Cached(1));
  EXPECT_EQ(store_->Pin(kNs, Key(1), 1).code(), StatusCode::kNotFound);
}

// A lookup's hold keeps the prefix it found until the engine loads it, and never shortens a pin
// that lasts longer.
TEST_F(StoreTest, HeldBlocksSurviveEvictionAndLongerPinsStay) {
  Build({2});
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  const BlockKey held[] = {Key(1), Key(9)};  // 9 is not cached: nothing to hold
  store_->Hold(kNs, held, 1'000'000);
  ASSERT_TRUE(PutBlock(3).ok());  // evicts 2, not the older but held 1
  EXPECT_TRUE(Cached(1));
  EXPECT_FALSE(Cached(2));
  ASSERT_TRUE(store_->Pin(kNs, Key(3), 10'000'000).ok());
  const BlockKey pinned[] = {Key(3)};
  store_->Hold(kNs, pinned, 1'000'000);
  clock_.AdvanceMicros(2'000'000);  // the holds are over; 3's pin is not
  ASSERT_TRUE(PutBlock(4).ok());
  EXPECT_FALSE(Cached(1));
  EXPECT_TRUE(Cached(3));
}

TEST_F(StoreTest, VictimsAreDemotedToTheNextTierAndStillServed) {
  StoreOptions read_in_place;  // promotion on read is store_tier_moves_test's subject
  read_in_place.promote_on_read = false;
  Build({2, 3}, /*last_addressable=*/false, read_in_place);
  for (uint64_t n = 1; n <= 5; ++n) ASSERT_TRUE(PutBlock(n).ok());
  std::vector<BlockKey> chain{Key(1), Key(2), Key(3), Key(4), Key(5)};
  index::LookupResult r = store_->Lookup(kNs, chain);
  ASSERT_EQ(r.ready_prefix, 5u);
  EXPECT_EQ(r.tiers, (std::vector{TierId::kNvme, TierId::kNvme, TierId::kNvme, TierId::kHost,
                                  TierId::kHost}));
  for (uint64_t n = 1; n <= 5; ++n) {
    std::vector<std::byte> out;
    ASSERT_TRUE(store_->Get(kNs, Key(n), out).ok());
    EXPECT_EQ(out, Payload(n)) << n;
  }
  ASSERT_TRUE(PutBlock(6).ok());  // the last tier is full too: its oldest block is dropped
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.tiers[0].demotions, 4u);
  EXPECT_EQ(s.tiers[1].drops, 1u);
  EXPECT_EQ(s.evicted_blocks, 1u);
  EXPECT_EQ(s.blocks_present, 5u);
}

TEST_F(StoreTest, AFailingNextTierMeansTheVictimIsDroppedNotLost) {
  Build({1, 4}, /*last_addressable=*/false);
  tiers_[1]->set_fail_io(true);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  EXPECT_FALSE(Cached(1));
  EXPECT_TRUE(Cached(2));
  EXPECT_EQ(store_->Stats().evicted_blocks, 1u);
}

TEST_F(StoreTest, NamespacesAreIsolated) {
  Build({4});
  ASSERT_TRUE(store_->RegisterNamespace({kOtherNs, 16, kBlock, "other"}).ok());
  ASSERT_TRUE(PutBlock(1).ok());
  std::vector<BlockKey> keys{Key(1)};
  EXPECT_EQ(store_->Lookup(kOtherNs, keys).ready_prefix, 0u);
  EXPECT_EQ(store_->Acquire(kOtherNs, Key(1)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Remove(kOtherNs, Key(1)).code(), StatusCode::kNotFound);
  EXPECT_TRUE(Cached(1));
}

TEST_F(StoreTest, StatsCountLookupsHitsAndTokens) {
  Build({4});
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  std::vector<BlockKey> chain{Key(1), Key(2), Key(3), Key(4)};
  EXPECT_EQ(store_->Lookup(kNs, chain).ready_prefix, 2u);
  StoreStats s = store_->Stats();
  ASSERT_EQ(s.namespaces.size(), 1u);
  const NamespaceStats& ns = s.namespaces[0];
  EXPECT_EQ(ns.lookups, 1u);
  EXPECT_EQ(ns.lookup_blocks, 4u);
  EXPECT_EQ(ns.hit_blocks[static_cast<size_t>(TierId::kHost)], 2u);
  EXPECT_EQ(ns.hit_tokens, 32u);
  EXPECT_EQ(ns.miss_blocks, 2u);
  EXPECT_DOUBLE_EQ(ns.block_hit_ratio(), 0.5);
  EXPECT_EQ(ns.puts, 2u);
  EXPECT_EQ(s.tiers[0].space.used_bytes, 2 * kBlock);
}

TEST_F(StoreTest, DropNamespaceRemovesItsBlocksAndLeasedOnesOnRelease) {
  Build({4});
  ASSERT_TRUE(store_->RegisterNamespace({kOtherNs, 16, kBlock, "other"}).ok());
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  ASSERT_TRUE(PutBlock(3, kOtherNs).ok());
  auto lease = store_->Acquire(kNs, Key(2));
  auto pending = store_->BeginPut(kNs, Key(4), kBlock);
  ASSERT_TRUE(lease.ok() && pending.ok());
  auto removed = store_->DropNamespace(kNs);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1u);
  EXPECT_EQ(store_->CommitPut(pending->id).code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->Release(lease->id).ok());
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.blocks_present, 1u);  // only the other namespace's block
  EXPECT_EQ(store_->DropNamespace(kNs).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, ANamespaceRegisteredAgainDoesNotGetBackWhatItsDropSkipped) {
  // A drop invalidates what it finds: a block leased at the drop, and a put in flight, must not
  // come back because the engine registered the namespace again before the lease or the put
  // ended (the registry was asked only whether the namespace was registered now).
  Build({4});
  ASSERT_TRUE(PutBlock(1).ok());
  auto lease = store_->Acquire(kNs, Key(1));
  auto pending = store_->BeginPut(kNs, Key(2), kBlock);
  ASSERT_TRUE(lease.ok() && pending.ok());
  ASSERT_EQ(*store_->DropNamespace(kNs), 0u);
  ASSERT_TRUE(store_->RegisterNamespace({kNs, 16, kBlock, "test"}).ok());
  EXPECT_EQ(store_->CommitPut(pending->id).code(), StatusCode::kNotFound);
  // The leased block is not the new namespace's, even while its lease lasts: not found, and a put
  // of its key waits (BUSY) rather than being told the block is stored.
  EXPECT_EQ(store_->Lookup(kNs, std::vector<BlockKey>{Key(1)}).ready_prefix, 0u);
  EXPECT_EQ(store_->Acquire(kNs, Key(1)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->BeginPut(kNs, Key(1), kBlock).status().code(), StatusCode::kBusy);
  // Nor is it the namespace's to remove (not "leased, remove it later").
  EXPECT_EQ(store_->Remove(kNs, Key(1)).code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->Release(lease->id).ok());
  EXPECT_EQ(store_->Lookup(kNs, std::vector<BlockKey>{Key(1)}).ready_prefix, 0u);
  EXPECT_EQ(store_->Lookup(kNs, std::vector<BlockKey>{Key(2)}).ready_prefix, 0u);
  EXPECT_EQ(store_->Stats().blocks_present, 0u);
  // The namespace as registered now is whole: a block put after the drop stays.
  ASSERT_TRUE(PutBlock(3).ok());
  auto later = store_->Acquire(kNs, Key(3));
  ASSERT_TRUE(later.ok());
  ASSERT_TRUE(store_->Release(later->id).ok());
  EXPECT_EQ(store_->Lookup(kNs, std::vector<BlockKey>{Key(3)}).ready_prefix, 1u);
}

TEST_F(StoreTest, RejectsBadTierLists) {
  FakeTier a(TierId::kHost, kBlock), b(TierId::kHost, kBlock);
  EXPECT_EQ(Store::Create({}, {}, clock_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Store::Create({}, {&a, &b}, clock_).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::store

namespace kvtier::store {
namespace {

// Runs a loop of blocks 1.5 x the size of the last tier, one every 64 ms, through a store
// whose last tier (host alone, or NVMe below a small host tier) has `policy`. Counts the reads of
// the second half that hit (checking their bytes) and the puts answered REJECTED.
struct LoopOutcome {
  uint64_t late_hits = 0;
  uint64_t rejected_puts = 0;
  uint64_t not_admitted = 0;
};

class StickyStoreTest : public StoreTest {
 protected:
  LoopOutcome RunLoop(std::vector<uint64_t> tier_blocks, const std::string& policy) {
    StoreOptions options;
    options.index.tier_policies[static_cast<size_t>(
        tier_blocks.size() == 1 ? TierId::kHost : TierId::kNvme)] = policy;
    Build(tier_blocks, true, options);
    LoopOutcome outcome;
    const uint64_t keys = tier_blocks.back() * 3 / 2;
    for (uint64_t round = 0; round < 20; ++round) {
      for (uint64_t n = 0; n < keys; ++n) {
        clock_.AdvanceMicros(64'000);
        // Uniform hashes, as the daemon's keys are: the policy measures 1 in 16 of them.
        const BlockKey key{{n * 0x9E3779B97F4A7C15ULL, n}};
        const std::vector<BlockKey> lookup{key};
        if (store_->Lookup(kNs, lookup).ready_prefix == 1) {
          std::vector<std::byte> out;
          EXPECT_TRUE(store_->Get(kNs, key, out).ok());
          EXPECT_EQ(out, Payload(n));
          outcome.late_hits += round >= 10;
          continue;
        }
        const Status put = store_->Put(kNs, key, Payload(n));
        if (put.code() == StatusCode::kRejected) {
          ++outcome.rejected_puts;
          continue;
        }
        EXPECT_TRUE(put.ok()) << put.ToString();
      }
    }
    outcome.not_admitted = store_->Stats().not_admitted_blocks;
    return outcome;
  }
};

// Host tier alone: LRU evicts every block before its next read and never hits; sticky learns that
// its victims are younger than the blocks' reuse gap, answers new puts REJECTED, and keeps two
// thirds of the loop, whose reads hit with the bytes that were put.
TEST_F(StickyStoreTest, AHostTierRefusesPutsWhileALoopLargerThanItThrashesIt) {
  const LoopOutcome lru = RunLoop({512}, "lru");
  EXPECT_EQ(lru.late_hits, 0u);
  EXPECT_EQ(lru.rejected_puts, 0u);
  EXPECT_EQ(lru.not_admitted, 0u);
  const LoopOutcome sticky = RunLoop({512}, "sticky");
  EXPECT_GT(sticky.rejected_puts, 0u);
  EXPECT_EQ(sticky.not_admitted, sticky.rejected_puts);
  EXPECT_GT(sticky.late_hits, 10u * 768 / 2);
}

// NVMe below a small host tier: puts always land in the host tier, and the NVMe tier's policy
// decides whether the host's victims are written down or dropped.
TEST_F(StickyStoreTest, AnNvmeTierDropsDemotionsWhileALoopLargerThanItThrashesIt) {
  const LoopOutcome lru = RunLoop({16, 512}, "lru");
  EXPECT_EQ(lru.late_hits, 0u);
  EXPECT_EQ(lru.not_admitted, 0u);
  const LoopOutcome sticky = RunLoop({16, 512}, "sticky");
  EXPECT_EQ(sticky.rejected_puts, 0u);
  EXPECT_GT(sticky.not_admitted, 0u);
  EXPECT_GT(sticky.late_hits, 10u * 768 / 2);
}

// Regression: a host arena full of slabs of one block size refused every block of another size
// with BUSY, because evicting least-recently-used blocks one at a time frees slots scattered over
// many slabs and never a whole slab (slab calcification). The store now empties the slab around
// its LRU block.
TEST(StoreSlabTest, ABlockOfANewSizeGetsASlabFromAFullArena) {
  constexpr uint64_t kSlab = 64 * 1024;
  auto host = tiers::HostTier::Create({.capacity_bytes = 4 * kSlab,
                                       .slab_bytes = kSlab,
                                       .alignment = 4096,
                                       .try_huge_pages = false,
                                       .try_mlock = false,
                                       .name = "slab-test"});
  ASSERT_TRUE(host.ok());
  FakeClock clock;
  auto store = Store::Create({}, {host->get()}, clock);
  ASSERT_TRUE(store.ok());
  const NamespaceId any_size{{7, 7}};
  ASSERT_TRUE((*store)->RegisterNamespace({any_size, 0, 0, "any"}).ok());
  std::vector<std::byte> small(4096, std::byte{1});
  for (uint64_t n = 0; n < 64; ++n) ASSERT_TRUE((*store)->Put(any_size, Key(n), small).ok());
  // Touch every other block so recency is spread over all four slabs.
  for (uint64_t n = 0; n < 64; n += 2) {
    std::vector<BlockKey> keys{Key(n)};
    (*store)->Lookup(any_size, keys);
  }
  std::vector<std::byte> big(20 * 1024, std::byte{2});
  ASSERT_TRUE((*store)->Put(any_size, Key(1000), big).ok());
  std::vector<std::byte> out;
  ASSERT_TRUE((*store)->Get(any_size, Key(1000), out).ok());
  EXPECT_EQ(out, big);
  StoreStats s = (*store)->Stats();
  EXPECT_EQ(s.blocks_present, 64u - 16u + 1u);  // one slab of sixteen 4 KiB blocks was emptied
  EXPECT_EQ(s.committed_puts, s.blocks_present + s.evicted_blocks + s.removed_blocks);
}

}  // namespace
}  // namespace kvtier::store

namespace kvtier::store {
namespace {

// A tier that runs a hook inside Write: a slow copy to the next tier during which other clients
// act.
class HookedTier final : public tiers::Tier {
 public:
  HookedTier(TierId id, uint64_t capacity) : inner_(id, capacity, /*addressable=*/false) {}
  TierId id() const override { return inner_.id(); }
  Result<Extent> Allocate(uint64_t bytes) override { return inner_.Allocate(bytes); }
  void Free(const Extent& e) override { inner_.Free(e); }
  Status Write(const Extent& e, std::span<const std::byte> src) override {
    Status st = inner_.Write(e, src);
    if (hook) {
      auto h = std::move(hook);
      hook = nullptr;
      h();
    }
    return st;
  }
  Status Read(const Extent& e, std::span<std::byte> dst) override { return inner_.Read(e, dst); }
  tiers::TierStats Stats() const override { return inner_.Stats(); }
  std::function<void()> hook;

 private:
  FakeTier inner_;
};

// Regression: a demotion copied a block while the key was removed and stored again at the same
// extent (a SET overwrite); the move then pointed the key at the old bytes, and the new put wrote
// into memory the mover was still reading. The mover now pins the block while it copies: a
// Remove in that window answers BUSY (a SET retries), and the moved block is intact.
TEST(StoreRaceTest, ABlockBeingDemotedCannotBeReplacedUnderTheCopy) {
  FakeClock clock;
  FakeTier host(TierId::kHost, kBlock);  // room for exactly one block
  HookedTier nvme(TierId::kNvme, 4 * kBlock);
  auto store = Store::Create({}, {&host, &nvme}, clock);
  ASSERT_TRUE(store.ok());
  Store& s = **store;
  ASSERT_TRUE(s.RegisterNamespace({kNs, 16, kBlock, "t"}).ok());
  ASSERT_TRUE(s.Put(kNs, Key(1), Payload(100)).ok());
  Status remove_during_copy;
  nvme.hook = [&] { remove_during_copy = s.Remove(kNs, Key(1)); };
  ASSERT_TRUE(s.Put(kNs, Key(2), Payload(2)).ok());  // evicts key 1: the hook runs mid-copy
  EXPECT_EQ(remove_during_copy.code(), StatusCode::kBusy);
  std::vector<std::byte> out;
  ASSERT_TRUE(s.Get(kNs, Key(1), out).ok());
  EXPECT_EQ(out, Payload(100));
  ASSERT_TRUE(s.Remove(kNs, Key(1)).ok());
  ASSERT_TRUE(s.Put(kNs, Key(1), Payload(200)).ok());
  ASSERT_TRUE(s.Get(kNs, Key(1), out).ok());
  EXPECT_EQ(out, Payload(200));
}

// A store over `host` alone whose reservations time out after a second of `clock`, with kNs.
std::unique_ptr<Store> StoreWithSecondTimeouts(FakeClock& clock, FakeTier& host) {
  StoreOptions options;
  options.reservation_timeout_us = 1'000'000;
  auto store = Store::Create(options, {&host}, clock);
  EXPECT_TRUE(store.ok());
  if (!store.ok()) return nullptr;
  EXPECT_TRUE((*store)->RegisterNamespace({kNs, 16, kBlock, "t"}).ok());
  return std::move(store).value();
}

// Regression: a reservation timed out, its slot went to another put, and the late writer's bytes
// then overwrote that committed block.
TEST(StoreRaceTest, ALateWriterNeverOverwritesAnotherBlock) {
  FakeClock clock;
  FakeTier host(TierId::kHost, 4 * kBlock);
  std::unique_ptr<Store> store = StoreWithSecondTimeouts(clock, host);
  ASSERT_NE(store, nullptr);
  Store& s = *store;
  auto slow = s.BeginPut(kNs, Key(1), kBlock);
  ASSERT_TRUE(slow.ok());
  clock.AdvanceMicros(2'000'000);
  EXPECT_EQ(s.ExpireDeadlines(), 1u);
  ASSERT_TRUE(s.Put(kNs, Key(2), Payload(2)).ok());
  std::vector<std::byte> late = Payload(1);
  std::memcpy(slow->address, late.data(), late.size());  // the stalled writer wakes up
  EXPECT_EQ(s.CommitPut(slow->id).code(), StatusCode::kNotFound);
  std::vector<std::byte> out;
  ASSERT_TRUE(s.Get(kNs, Key(2), out).ok());
  EXPECT_EQ(out, Payload(2));
  // A writer that never reports back gives its space up after the grace period.
  auto silent = s.BeginPut(kNs, Key(3), kBlock);
  ASSERT_TRUE(silent.ok());
  clock.AdvanceMicros(2'000'000);
  s.ExpireDeadlines();
  EXPECT_EQ(s.Stats().blocks_quarantined, 1u);
  clock.AdvanceMicros(Store::kQuarantineFactor * 1'000'000);
  s.ExpireDeadlines();
  EXPECT_EQ(s.Stats().blocks_quarantined, 0u);
  EXPECT_EQ(host.Stats().block_count, 1u);
}

// A writer whose connection ended may still be copying into its slot from its own process: the
// abandoned reservation's block goes at once, its slot only after the quarantine.
TEST(StoreReservationTest, AnAbandonedReservationKeepsItsSlotQuarantined) {
  FakeClock clock;
  FakeTier host(TierId::kHost, 2 * kBlock);
  std::unique_ptr<Store> store = StoreWithSecondTimeouts(clock, host);
  ASSERT_NE(store, nullptr);
  Store& s = *store;
  ASSERT_TRUE(s.Put(kNs, Key(0), Payload(0)).ok());
  auto gone = s.BeginPut(kNs, Key(1), kBlock);
  ASSERT_TRUE(gone.ok());
  ASSERT_TRUE(s.AbandonPut(gone->id).ok());
  EXPECT_TRUE(s.AbandonPut(gone->id).ok()) << "already quarantined: stays so";
  EXPECT_EQ(s.AbandonPut(gone->id + 1000).code(), StatusCode::kNotFound);
  EXPECT_EQ(s.Stats().blocks_writing, 0u);
  EXPECT_EQ(s.Stats().blocks_quarantined, 1u);
  EXPECT_FALSE(s.RenewReservation(gone->id)) << "nothing more may be written there";
  // The slot is not given to the next put: it evicts the block it found instead.
  ASSERT_TRUE(s.Put(kNs, Key(2), Payload(2)).ok());
  std::vector<std::byte> late = Payload(1);
  std::memcpy(gone->address, late.data(), late.size());  // the writer's copy lands late
  std::vector<std::byte> out;
  ASSERT_TRUE(s.Get(kNs, Key(2), out).ok());
  EXPECT_EQ(out, Payload(2));
  EXPECT_EQ(s.CommitPut(gone->id).code(), StatusCode::kNotFound);
  clock.AdvanceMicros(Store::kQuarantineFactor * 1'000'000 + 1);
  s.ExpireDeadlines();
  EXPECT_EQ(s.Stats().blocks_quarantined, 0u);
  EXPECT_EQ(host.Stats().block_count, 1u) << "the slot is free again";
}

// Regression: a put of a key held by another namespace answered "already stored", so the caller
// skipped its copy and then never found the block.
TEST(StoreRaceTest, AKeyOfAnotherNamespaceIsNeverAlreadyStored) {
  FakeClock clock;
  FakeTier host(TierId::kHost, 4 * kBlock);
  auto store = Store::Create({}, {&host}, clock);
  ASSERT_TRUE(store.ok());
  Store& s = **store;
  ASSERT_TRUE(s.RegisterNamespace({kNs, 16, kBlock, "a"}).ok());
  ASSERT_TRUE(s.RegisterNamespace({kOtherNs, 16, kBlock, "b"}).ok());
  ASSERT_TRUE(s.Put(kOtherNs, Key(1), Payload(1)).ok());
  EXPECT_EQ(s.Put(kNs, Key(1), Payload(1)).code(), StatusCode::kRejected);
}

}  // namespace
}  // namespace kvtier::store

namespace kvtier::store {
namespace {

TEST(StoreLimitsTest, LeasesAndReservationsAreCappedDaemonWide) {
  FakeClock clock;
  FakeTier host(TierId::kHost, 8 * kBlock);
  StoreOptions options;
  options.max_leases = 2;
  options.max_reservations = 1;
  auto store = Store::Create(options, {&host}, clock);
  ASSERT_TRUE(store.ok());
  Store& s = **store;
  ASSERT_TRUE(s.RegisterNamespace({kNs, 16, kBlock, "t"}).ok());
  ASSERT_TRUE(s.Put(kNs, Key(1), Payload(1)).ok());
  auto a = s.Acquire(kNs, Key(1));
  auto b = s.Acquire(kNs, Key(1));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(s.Acquire(kNs, Key(1)).status().code(), StatusCode::kBusy);
  ASSERT_TRUE(s.Release(a->id).ok());
  auto c = s.Acquire(kNs, Key(1));
  ASSERT_TRUE(c.ok());
  auto r = s.BeginPut(kNs, Key(2), kBlock);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(s.BeginPut(kNs, Key(3), kBlock).status().code(), StatusCode::kBusy);
  ASSERT_TRUE(s.AbortPut(r->id).ok());
  EXPECT_TRUE(s.Put(kNs, Key(3), Payload(3)).ok());
  ASSERT_TRUE(s.Release(b->id).ok());
  ASSERT_TRUE(s.Release(c->id).ok());
}

}  // namespace
}  // namespace kvtier::store
