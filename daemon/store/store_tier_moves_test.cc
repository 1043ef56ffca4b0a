// Placement between the host tier and a tier that is not memory (a FakeTier standing in for
// NVMe): demotion on eviction, promotion on read, reads in place, corrupt blocks, admission, the
// background mover's eviction to a target, and blocks adopted at start-up.
#include <gtest/gtest.h>

#include "daemon/store/store.h"
#include "daemon/store/store_test_fixture.h"

namespace kvtier::store {
namespace {

using testing::FakeTier;
using testing::kBlock;
using testing::Key;
using testing::kNs;
using testing::kOtherNs;
using testing::Payload;
using testing::StoreTest;

class StorePlacementTest : public StoreTest {
 protected:
  // A host tier of `host_blocks` blocks above a durable-like tier of `nvme_blocks`.
  void BuildTwoTiers(uint64_t host_blocks, uint64_t nvme_blocks, StoreOptions options = {}) {
    Build({host_blocks, nvme_blocks}, /*last_addressable=*/false, options);
  }
  FakeTier& nvme() { return *tiers_[1]; }
};

TEST_F(StorePlacementTest, EvictedBlocksGoDownAndComeBackUpWhenRead) {
  BuildTwoTiers(2, 8);
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  EXPECT_EQ(TierOf(3), TierId::kHost);
  Result<Lease> lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->tier, TierId::kHost);
  ASSERT_NE(lease->address, nullptr);
  EXPECT_EQ(std::vector<std::byte>(lease->address, lease->address + kBlock), Payload(1));
  ASSERT_TRUE(store_->Release(lease->id).ok());
  const StoreStats s = store_->Stats();
  EXPECT_EQ(TierStatsOf(s, TierId::kNvme).promotions, 1u);
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).demotions, 2u);  // 1, then the victim of its return
  EXPECT_EQ(s.blocks_present, 3u);
}

TEST_F(StorePlacementTest, WithoutPromotionABlockIsReadInPlace) {
  StoreOptions options;
  options.promote_on_read = false;
  BuildTwoTiers(1, 8, options);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  ASSERT_EQ(TierOf(1), TierId::kNvme);
  Result<Lease> lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->tier, TierId::kNvme);
  EXPECT_EQ(lease->address, nullptr);
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(store_->ReadLeased(*lease, out).ok());
  EXPECT_EQ(out, Payload(1));
  ASSERT_TRUE(store_->Release(lease->id).ok());
  EXPECT_EQ(TierOf(1), TierId::kNvme);
}

TEST_F(StorePlacementTest, ACorruptBlockIsAMissAndIsDropped) {
  BuildTwoTiers(1, 8);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  ASSERT_EQ(TierOf(1), TierId::kNvme);
  nvme().FlipByte(0);  // block 1 is the only one there, at offset 0
  EXPECT_EQ(store_->Acquire(kNs, Key(1)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(TierOf(1), TierId::kGpu);  // gone
  EXPECT_EQ(TierStatsOf(store_->Stats(), TierId::kNvme).corrupt_drops, 1u);
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(2), out).ok());
  EXPECT_EQ(out, Payload(2));
}

TEST_F(StorePlacementTest, ACorruptBlockReadInPlaceGoesWhenItsLeaseEnds) {
  StoreOptions options;
  options.promote_on_read = false;
  BuildTwoTiers(1, 8, options);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  nvme().FlipByte(kBlock - 1);
  Result<Lease> lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  std::vector<std::byte> out(kBlock);
  EXPECT_EQ(store_->ReadLeased(*lease, out).code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(TierOf(1), TierId::kNvme);  // still leased
  ASSERT_TRUE(store_->Release(lease->id).ok());
  EXPECT_EQ(TierOf(1), TierId::kGpu);
  EXPECT_EQ(store_->Get(kNs, Key(1), out).code(), StatusCode::kNotFound);
}

// A block whose reads keep failing with a device error (a bad sector) would fail at every
// request: its second failure drops it like a corrupt one (read in place here; promoted by the
// mover: StoreBatchMovesTest).
TEST_F(StorePlacementTest, ABlockWhoseReadInPlaceFailsTwiceGoesWhenItsLeaseEnds) {
  StoreOptions options;
  options.promote_on_read = false;
  BuildTwoTiers(1, 8, options);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  nvme().FailBlocksOf(Key(1));
  Result<Lease> lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  std::vector<std::byte> out(kBlock);
  EXPECT_EQ(store_->ReadLeased(*lease, out).code(), StatusCode::kDeviceError);
  EXPECT_EQ(store_->ReadLeased(*lease, out).code(), StatusCode::kDeviceError);
  clock_.AdvanceMicros(ReadFailures::kMinGapUs);
  EXPECT_EQ(store_->ReadLeased(*lease, out).code(), StatusCode::kDeviceError);
  EXPECT_EQ(TierOf(1), TierId::kNvme);  // still leased
  ASSERT_TRUE(store_->Release(lease->id).ok());
  EXPECT_EQ(TierOf(1), TierId::kGpu);
  EXPECT_EQ(store_->Get(kNs, Key(1), out).code(), StatusCode::kNotFound);
}

// Two failures within ReadFailures::kMinGapUs (a controller reset) keep the block, as does a read
// that succeeds between two failures further apart.
TEST_F(StorePlacementTest, ABlockWhoseReadsFailForAMomentIsKept) {
  StoreOptions options;
  options.promote_on_read = false;
  BuildTwoTiers(1, 8, options);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  Result<Lease> lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  std::vector<std::byte> out(kBlock);
  nvme().set_fail_io(true);
  EXPECT_EQ(store_->ReadLeased(*lease, out).code(), StatusCode::kDeviceError);
  EXPECT_EQ(store_->ReadLeased(*lease, out).code(), StatusCode::kDeviceError);
  nvme().set_fail_io(false);
  ASSERT_TRUE(store_->ReadLeased(*lease, out).ok());
  clock_.AdvanceMicros(ReadFailures::kMinGapUs);
  nvme().set_fail_io(true);
  EXPECT_EQ(store_->ReadLeased(*lease, out).code(), StatusCode::kDeviceError);
  nvme().set_fail_io(false);
  ASSERT_TRUE(store_->Release(lease->id).ok());
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());
  EXPECT_EQ(out, Payload(1));
}

TEST_F(StorePlacementTest, ReusedAdmissionKeepsOnlyBlocksThatWereReadOffTheDisk) {
  StoreOptions options;
  options.nvme_admission = "reused";
  BuildTwoTiers(2, 8, options);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  ASSERT_EQ(TierOf(2), TierId::kHost);  // a lookup: block 2 has now been read once
  ASSERT_TRUE(PutBlock(3).ok());        // evicts 1 (never read): dropped
  ASSERT_TRUE(PutBlock(4).ok());        // evicts 2: written to NVMe
  EXPECT_EQ(TierOf(1), TierId::kGpu);
  EXPECT_EQ(TierOf(2), TierId::kNvme);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).admission_drops, 1u);
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).demotions, 1u);
}

TEST_F(StorePlacementTest, UnknownAdmissionPolicyIsRefusedAtCreation) {
  StoreOptions options;
  options.nvme_admission = "sometimes";
  FakeClock clock;
  kvtier::testing::FakeTier host(TierId::kHost, 4 * kBlock);
  auto store = Store::Create(options, {&host}, clock);
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StorePlacementTest, EvictToTargetMovesTheOldestBlocksDown) {
  BuildTwoTiers(4, 8);
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 2 * kBlock, 100), 2u);
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  EXPECT_EQ(TierOf(2), TierId::kNvme);
  EXPECT_EQ(TierOf(3), TierId::kHost);
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 2 * kBlock, 100), 0u);  // already there
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 0, 1), 1u);             // bounded
}

// Puts waiting for room are told after each block goes down, not once the mover's whole batch is
// done: waiting for the batch doubled the puts' tail latency under spill.
TEST_F(StorePlacementTest, EvictToTargetSaysSoAfterEveryBlockItMoves) {
  BuildTwoTiers(4, 8);
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  int told = 0;
  store_->SetMoveListener([&told] { ++told; });
  ASSERT_EQ(store_->EvictToTarget(TierId::kHost, kBlock, 100), 3u);
  EXPECT_EQ(told, 3);
  store_->SetMoveListener({});
}

TEST_F(StorePlacementTest, AdoptedBlocksAreServedFromWhereTheyLie) {
  BuildTwoTiers(2, 8);
  // What a durable tier found on disk at start-up: the bytes are already there.
  Result<Extent> extent = nvme().Allocate(kBlock);
  ASSERT_TRUE(extent.ok());
  ASSERT_TRUE(nvme().WriteBlock(*extent, {kNs, Key(7)}, Payload(7)).ok());
  ASSERT_TRUE(store_->AdoptBlock(TierId::kNvme, kNs, Key(7), *extent, std::nullopt).ok());
  EXPECT_EQ(store_->AdoptBlock(TierId::kNvme, kNs, Key(7), *extent, std::nullopt).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->AdoptBlock(TierId::kGpu, kNs, Key(8), *extent, std::nullopt).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(TierOf(7), TierId::kNvme);
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(7), out).ok());
  EXPECT_EQ(out, Payload(7));
  EXPECT_EQ(store_->Stats().adopted_blocks, 1u);
}

// A key removed (or written again) while the blocks found at start-up are still being adopted:
// its recovered copy is older than what the client did since and is refused, so that a DEL is
// not undone by the adoption that reaches the key later; and the tiers are told at once to drop
// it, so that a run that ends before adopting it does not leave it for the next start.
TEST_F(StorePlacementTest, AKeyRemovedOrPutDuringAdoptionDoesNotGetItsOldCopyBack) {
  BuildTwoTiers(2, 8);
  std::vector<Extent> found;
  for (uint64_t n : {1, 2, 3}) {
    Result<Extent> extent = nvme().Allocate(kBlock);
    ASSERT_TRUE(extent.ok());
    ASSERT_TRUE(nvme().WriteBlock(*extent, {kNs, Key(n)}, Payload(n)).ok());
    found.push_back(*extent);
  }
  store_->SetPendingAdoptions(3);
  EXPECT_EQ(store_->Remove(kNs, Key(1)).code(), StatusCode::kNotFound);  // not adopted yet
  ASSERT_TRUE(PutBlock(2).ok());
  ASSERT_TRUE(store_->Remove(kNs, Key(2)).ok());  // written again, then removed
  // Key 1 once (its remove), key 2 twice (its put, its remove); key 3 untouched.
  EXPECT_EQ(nvme().dropped_recovered(), (std::vector<BlockKey>{Key(1), Key(2), Key(2)}));
  EXPECT_EQ(store_->AdoptBlock(TierId::kNvme, kNs, Key(1), found[0], std::nullopt).code(),
            StatusCode::kRejected);
  EXPECT_EQ(store_->AdoptBlock(TierId::kNvme, kNs, Key(2), found[1], std::nullopt).code(),
            StatusCode::kRejected);
  ASSERT_TRUE(store_->AdoptBlock(TierId::kNvme, kNs, Key(3), found[2], std::nullopt).ok());
  nvme().Free(found[0]);
  nvme().Free(found[1]);
  store_->SetPendingAdoptions(0);
  EXPECT_FALSE(Cached(1));
  EXPECT_FALSE(Cached(2));
  EXPECT_TRUE(Cached(3));
  ASSERT_TRUE(store_->Remove(kNs, Key(3)).ok());  // adoption over: nothing to drop
  EXPECT_EQ(nvme().dropped_recovered().size(), 3u);
  // Once adoption is over, nothing is remembered: a later start adopts what it finds.
  Result<Extent> later = nvme().Allocate(kBlock);
  ASSERT_TRUE(later.ok());
  ASSERT_TRUE(store_->AdoptBlock(TierId::kNvme, kNs, Key(1), *later, std::nullopt).ok());
}

// Blocks found at start-up are adopted while the daemon serves: a namespace dropped meanwhile
// must not get the rest of its blocks back, in this run or (the tiers told to drop them) the
// next.
TEST_F(StorePlacementTest, ANamespaceDroppedDuringAdoptionGetsNoMoreBlocks) {
  BuildTwoTiers(2, 8);
  Result<Extent> first = nvme().Allocate(kBlock);
  Result<Extent> second = nvme().Allocate(kBlock);
  ASSERT_TRUE(first.ok() && second.ok());
  store_->SetPendingAdoptions(2);
  ASSERT_TRUE(store_->AdoptBlock(TierId::kNvme, kNs, Key(1), *first, std::nullopt).ok());
  Result<uint64_t> dropped = store_->DropNamespace(kNs);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, 1u);
  EXPECT_EQ(nvme().dropped_recovered(), std::vector<BlockKey>{FakeTier::kWholeNamespace});
  EXPECT_EQ(store_->AdoptBlock(TierId::kNvme, kNs, Key(2), *second, std::nullopt).code(),
            StatusCode::kRejected);
  nvme().Free(*second);
  store_->SetPendingAdoptions(0);
  ASSERT_TRUE(store_->RegisterNamespace({kNs, 16, kBlock, "test"}).ok());
  EXPECT_EQ(TierOf(2), TierId::kGpu);  // absent
}

TEST_F(StorePlacementTest, WriteThroughPutsAreOnNvmeAtOnceAndDemoteWithoutAWrite) {
  StoreOptions options;
  options.nvme_write_through = true;
  BuildTwoTiers(2, 8, options);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  EXPECT_EQ(nvme().block_writes(), 2u);  // both already on NVMe
  EXPECT_EQ(nvme().Stats().block_count, 2u);
  ASSERT_TRUE(PutBlock(3).ok());  // evicts 1: it moves into its shadow
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  EXPECT_EQ(TierOf(2), TierId::kHost);
  EXPECT_EQ(store_->Stats().blocks_shadowed, 2u);  // 2 and 3
  EXPECT_EQ(nvme().block_writes(), 3u);            // only block 3's write-through
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());
  EXPECT_EQ(out, Payload(1));
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.write_throughs, 3u);
  EXPECT_EQ(s.write_through_failures, 0u);
  // Removing a block frees its shadow too.
  const uint64_t before = nvme().Stats().block_count;
  ASSERT_TRUE(store_->Remove(kNs, Key(3)).ok());
  EXPECT_EQ(nvme().Stats().block_count, before - 1);
}

// Admission guards the disk's writes; a write-through block's eviction writes nothing (its copy
// is there), so an admission that refuses blocks never read does not drop it, copy and all
// (regression: the copy was freed and the acknowledged block lost).
TEST_F(StorePlacementTest, AdmissionDoesNotDropAWriteThroughBlocksCopy) {
  StoreOptions options;
  options.nvme_write_through = true;
  options.nvme_admission = "reused";
  BuildTwoTiers(2, 8, options);
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(PutBlock(n).ok());  // 3 evicts 1, never read
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  EXPECT_EQ(nvme().Stats().block_count, 3u);
  EXPECT_EQ(TierStatsOf(store_->Stats(), TierId::kHost).admission_drops, 0u);
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());
  EXPECT_EQ(out, Payload(1));
}

// A write-through put was acknowledged as durable: reading it back up from NVMe must not take it
// off the disk, or the next crash loses it (regression: the read moved it into host memory).
TEST_F(StorePlacementTest, AWriteThroughBlockReadUpFromNvmeKeepsItsNvmeCopy) {
  StoreOptions options;
  options.nvme_write_through = true;
  BuildTwoTiers(2, 8, options);
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_EQ(TierOf(1), TierId::kNvme);  // evicted into its shadow
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());  // promoted on read
  EXPECT_EQ(out, Payload(1));
  EXPECT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(nvme().Stats().block_count, 3u);       // all three are still on NVMe
  EXPECT_EQ(store_->Stats().blocks_shadowed, 2u);  // 1 again, and one of 2 and 3 (the other
                                                   // went down into its copy for 1's room)
  // Going down again costs no write: the copy is still there.
  const uint64_t writes = nvme().block_writes();
  ASSERT_TRUE(PutBlock(4).ok());
  ASSERT_TRUE(PutBlock(5).ok());
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  EXPECT_EQ(nvme().block_writes(), writes + 2);  // 4's and 5's own write-throughs only
}

// Without write-through, a block read up from NVMe keeps its copy there too (within
// nvme_copy_share of the tier: by default an eighth, one block of these eight), so that its next
// eviction moves it back into the copy and writes nothing.
TEST_F(StorePlacementTest, ABlockReadUpFromNvmeKeepsItsCopyAndGoesBackWithoutAWrite) {
  BuildTwoTiers(2, 8);
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_EQ(TierOf(1), TierId::kNvme);
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());  // promoted on read; 2 goes down for room
  ASSERT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(nvme().Stats().block_count, 2u);  // 1's copy and 2
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.blocks_shadowed, 1u);
  EXPECT_EQ(s.shadow_bytes, kBlock);
  const uint64_t writes = nvme().block_writes();
  ASSERT_TRUE(PutBlock(4).ok());  // evicts 3: written
  ASSERT_TRUE(PutBlock(5).ok());  // evicts 1: into its copy
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  EXPECT_EQ(nvme().block_writes(), writes + 1);
  s = store_->Stats();
  EXPECT_EQ(s.blocks_shadowed, 0u);
  EXPECT_EQ(s.shadow_bytes, 0u);
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).demotions, 4u);       // 1, 2, 3 and 1 again
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).copy_demotions, 1u);  // 1 again
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());
  EXPECT_EQ(out, Payload(1));
}

TEST_F(StorePlacementTest, CopiesKeptOnNvmeStayWithinTheirShare) {
  BuildTwoTiers(2, 8);  // the default share, an eighth: one block
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_EQ(TierOf(1), TierId::kNvme);
  ASSERT_EQ(TierOf(2), TierId::kNvme);
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());  // keeps its copy: the share is full
  ASSERT_TRUE(store_->Get(kNs, Key(2), out).ok());  // its copy is freed
  ASSERT_EQ(TierOf(1), TierId::kHost);
  ASSERT_EQ(TierOf(2), TierId::kHost);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.blocks_shadowed, 1u);
  EXPECT_EQ(s.shadow_bytes, kBlock);
  // 3 and 4 went down for 1's and 2's room; 1's copy is the fourth block there.
  EXPECT_EQ(nvme().Stats().block_count, 3u);
  // Removing a block frees its copy with it.
  ASSERT_TRUE(store_->Remove(kNs, Key(1)).ok());
  EXPECT_EQ(nvme().Stats().block_count, 2u);
  EXPECT_EQ(store_->Stats().shadow_bytes, 0u);
}

// The share is of the NVMe tier's room, and a copy takes its record header there too: with a
// header as large as the block, an eighth of 16 blocks' room holds one copy, not two.
TEST_F(StorePlacementTest, TheCopyShareCountsTheRoomCopiesTakeOnNvme) {
  BuildTwoTiers(2, 16);
  nvme().set_block_overhead(kBlock);
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_EQ(TierOf(1), TierId::kNvme);
  ASSERT_EQ(TierOf(2), TierId::kNvme);
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());
  ASSERT_TRUE(store_->Get(kNs, Key(2), out).ok());
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.blocks_shadowed, 1u);
  EXPECT_EQ(s.shadow_bytes, 2 * kBlock);
}

TEST_F(StorePlacementTest, AZeroCopyShareFreesTheCopyOfABlockReadUp) {
  StoreOptions options;
  options.nvme_copy_share = 0;
  BuildTwoTiers(2, 8, options);
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());
  ASSERT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(nvme().Stats().block_count, 1u);  // 2 alone
  EXPECT_EQ(store_->Stats().blocks_shadowed, 0u);
  const uint64_t writes = nvme().block_writes();
  ASSERT_TRUE(PutBlock(4).ok());
  ASSERT_TRUE(PutBlock(5).ok());
  EXPECT_EQ(nvme().block_writes(), writes + 2);
  EXPECT_EQ(TierStatsOf(store_->Stats(), TierId::kHost).copy_demotions, 0u);
}

// A copy lies in NVMe's room like a block but is none: a large block whose room on NVMe takes
// the copy's place gives the copy up (its block stays in memory) instead of being dropped.
TEST_F(StorePlacementTest, ACopyInTheRoomALargeBlockNeedsOnNvmeIsGivenUp) {
  StoreOptions options;
  options.index.tier_policies[static_cast<size_t>(TierId::kNvme)] = "lru";
  BuildTwoTiers(9, 8, options);
  nvme().set_room_windows(true);
  nvme().set_names_blocks(true);
  const uint64_t big = 8 * kBlock;
  ASSERT_TRUE(store_->RegisterNamespace({kOtherNs, 16, big, "big"}).ok());
  for (uint64_t n = 1; n <= 8; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_EQ(store_->FlushToNvme(0).written, 8u);  // NVMe is full
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(4), out).ok());  // read up; its copy stays, an eighth
  ASSERT_EQ(store_->Stats().shadow_bytes, kBlock);
  ASSERT_TRUE(store_->Put(kOtherNs, Key(101), Payload(101, big)).ok());
  ASSERT_TRUE(Cached(4));  // more recent than 101
  // 102 needs 101's room: 101 goes down and needs the whole of NVMe, the copy's place too.
  ASSERT_TRUE(store_->Put(kOtherNs, Key(102), Payload(102, big)).ok());
  std::vector<BlockKey> keys{Key(101)};
  const index::LookupResult r = store_->Lookup(kOtherNs, keys);
  ASSERT_EQ(r.ready_prefix, 1u) << "101 was dropped";
  EXPECT_EQ(r.tiers[0], TierId::kNvme);
  EXPECT_EQ(TierOf(4), TierId::kHost);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.blocks_shadowed, 0u);
  EXPECT_EQ(s.shadow_bytes, 0u);
  ASSERT_TRUE(store_->Get(kNs, Key(4), out).ok());
  EXPECT_EQ(out, Payload(4));
}

// The same where the room is a window around an NVMe victim (Tier::ReclaimUnit) that a copy
// lies in: the window is emptied of the copy too, and no further block is evicted.
TEST_F(StorePlacementTest, ACopyInTheWindowAroundAVictimIsGivenUp) {
  StoreOptions options;
  options.index.tier_policies[static_cast<size_t>(TierId::kNvme)] = "lru";
  BuildTwoTiers(16, 16, options);
  nvme().set_room_windows(true);
  nvme().set_names_blocks(true);
  const uint64_t big = 4 * kBlock;
  ASSERT_TRUE(store_->RegisterNamespace({kOtherNs, 16, big, "big"}).ok());
  for (uint64_t n = 1; n <= 16; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_EQ(store_->FlushToNvme(0).written, 16u);  // block n at offset 16 - n; NVMe is full
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(11), out).ok());  // read up; its copy stays at offset 5
  ASSERT_EQ(store_->Stats().shadow_bytes, kBlock);
  // NVMe's least recently used: 16, 14, 7 and 5 (offsets 0, 2, 9, 11: no two side by side),
  // then 12 (offset 4), whose window of four runs over 11's copy, 10 and 9.
  for (uint64_t n : {16, 14, 7, 5, 12, 1, 2, 3, 4, 6, 8, 9, 10, 13, 15}) ASSERT_TRUE(Cached(n));
  ASSERT_TRUE(store_->Put(kOtherNs, Key(101), Payload(101, big)).ok());
  ASSERT_TRUE(Cached(11));  // more recent than 101
  // 11 and three large blocks fill 13 of the host's 16: the fourth sends 101 down.
  for (uint64_t n = 102; n <= 104; ++n) {
    ASSERT_TRUE(store_->Put(kOtherNs, Key(n), Payload(n, big)).ok());
  }
  std::vector<BlockKey> keys{Key(101)};
  const index::LookupResult r = store_->Lookup(kOtherNs, keys);
  ASSERT_EQ(r.ready_prefix, 1u) << "101 was dropped";
  EXPECT_EQ(r.tiers[0], TierId::kNvme);
  EXPECT_EQ(TierOf(11), TierId::kHost);
  EXPECT_EQ(store_->Stats().shadow_bytes, 0u);
  for (uint64_t n = 1; n <= 16; ++n) {
    const bool evicted = n == 16 || n == 14 || n == 7 || n == 5 || n == 12 || n == 10 || n == 9;
    EXPECT_EQ(Cached(n), !evicted) << "block " << n;
  }
}

TEST_F(StorePlacementTest, AnInvalidCopyShareIsRefused) {
  for (double share : {-0.1, 1.5}) {
    StoreOptions options;
    options.nvme_copy_share = share;
    std::vector<tiers::Tier*> tiers;
    FakeTier host(TierId::kHost, 4 * kBlock, true);
    tiers.push_back(&host);
    EXPECT_EQ(Store::Create(options, tiers, clock_).status().code(), StatusCode::kInvalidArgument)
        << share;
  }
}

TEST_F(StorePlacementTest, AFailingNvmeKeepsAWriteThroughPutInMemory) {
  StoreOptions options;
  options.nvme_write_through = true;
  BuildTwoTiers(2, 8, options);
  nvme().set_fail_io(true);
  ASSERT_TRUE(PutBlock(1).ok());
  EXPECT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(store_->Stats().write_through_failures, 1u);
  EXPECT_EQ(nvme().Stats().block_count, 0u);
}

}  // namespace
}  // namespace kvtier::store
