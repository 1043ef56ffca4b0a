// The clean-stop flush (Store::FlushToNvme): memory blocks written to the NVMe stand-in newest
// first, older NVMe blocks giving way but never a block the flush wrote, write-through copies
// reused, and a flush cut short leaving the rest where it was.
#include <gtest/gtest.h>

#include <stop_token>

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

class StoreFlushTest : public StoreTest {
 protected:
  void BuildTwoTiers(uint64_t host_blocks, uint64_t nvme_blocks, StoreOptions options = {},
                     uint64_t gpu_blocks = 0) {
    Build({host_blocks, nvme_blocks}, /*last_addressable=*/false, options, gpu_blocks);
  }
  TierId TierOf(uint64_t n) {
    std::vector<BlockKey> keys{Key(n)};
    index::LookupResult r = store_->Lookup(kNs, keys);
    EXPECT_EQ(r.ready_prefix, 1u) << "block " << n << " is gone";
    return r.ready_prefix == 1 ? r.tiers[0] : TierId::kGpu;
  }
  void ExpectBytes(uint64_t n) {
    std::vector<std::byte> out;
    ASSERT_TRUE(store_->Get(kNs, Key(n), out).ok()) << "block " << n;
    EXPECT_EQ(out, Payload(n)) << "block " << n;
  }
  FakeTier& nvme() { return *tiers_.back(); }
};

TEST_F(StoreFlushTest, EveryHostBlockGoesToNvmeWhenItFitsPinnedOnesToo) {
  BuildTwoTiers(4, 8);
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_TRUE(store_->Pin(kNs, Key(1), 60'000'000).ok());
  const Store::FlushResult r = store_->FlushToNvme(/*deadline_us=*/0);
  EXPECT_EQ(r.written, 4u);
  EXPECT_EQ(r.written_bytes, 4 * kBlock);
  EXPECT_EQ(r.left, 0u);
  EXPECT_FALSE(r.nvme_full);
  EXPECT_EQ(nvme().block_writes(), 4u);
  // Read in place: with promotion on read they would come back up, which is fine but not what is
  // being checked here.
  for (uint64_t n = 1; n <= 4; ++n) EXPECT_EQ(TierOf(n), TierId::kNvme) << "block " << n;
  for (uint64_t n = 1; n <= 4; ++n) ExpectBytes(n);
}

// Written newest first, the blocks are then marked used oldest first, so that a tier that keeps
// recency across a restart (the NVMe catalog) orders them as they were in memory.
TEST_F(StoreFlushTest, FlushedBlocksAreMarkedUsedOldestFirst) {
  StoreOptions options;
  options.promote_on_read = false;  // leases below see the blocks where the flush put them
  BuildTwoTiers(4, 8, options);
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_EQ(store_->FlushToNvme(0).written, 3u);
  std::vector<uint64_t> expected;
  for (uint64_t n = 1; n <= 3; ++n) {
    Result<Lease> lease = store_->Acquire(kNs, Key(n), Store::Reader::kHostMemory);
    ASSERT_TRUE(lease.ok());
    ASSERT_EQ(lease->tier, TierId::kNvme);
    expected.push_back(lease->extent.offset);
    ASSERT_TRUE(store_->Release(lease->id).ok());
  }
  EXPECT_EQ(nvme().uses(), expected);
}

TEST_F(StoreFlushTest, OlderNvmeBlocksMakeRoomForNewerHostBlocks) {
  BuildTwoTiers(4, 4);
  for (uint64_t n = 1; n <= 6; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_EQ(TierOf(1), TierId::kNvme);  // 1 and 2 were demoted by the puts of 5 and 6
  ASSERT_EQ(TierOf(2), TierId::kNvme);
  const Store::FlushResult r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written, 4u);
  EXPECT_EQ(r.left, 0u);
  std::vector<BlockKey> keys{Key(1)};
  EXPECT_EQ(store_->Lookup(kNs, keys).ready_prefix, 0u);  // dropped for block 4
  keys = {Key(2)};
  EXPECT_EQ(store_->Lookup(kNs, keys).ready_prefix, 0u);  // dropped for block 3
  for (uint64_t n = 3; n <= 6; ++n) EXPECT_EQ(TierOf(n), TierId::kNvme) << "block " << n;
}

TEST_F(StoreFlushTest, WhenNvmeIsFullOfFlushedBlocksTheOldestHostBlocksStay) {
  BuildTwoTiers(4, 2);
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  const Store::FlushResult r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written, 2u);
  EXPECT_EQ(r.left, 2u);
  EXPECT_TRUE(r.nvme_full);
  EXPECT_EQ(TierOf(4), TierId::kNvme);  // newest first
  EXPECT_EQ(TierOf(3), TierId::kNvme);
  EXPECT_EQ(TierOf(2), TierId::kHost);
  EXPECT_EQ(TierOf(1), TierId::kHost);
  // Blocks left behind are back in the host tier's eviction order: a put still finds room.
  ASSERT_TRUE(PutBlock(5).ok());
  ASSERT_TRUE(PutBlock(6).ok());
  ASSERT_TRUE(PutBlock(7).ok());
}

// A policy that evicts new blocks before older ones it has seen reused (s3fifo's small queue,
// tinylfu's admission window) offers a block the flush wrote as a victim while older NVMe blocks
// remain: the flush must go past it to those, not stop with host blocks left behind.
TEST_F(StoreFlushTest, OlderNvmeBlocksMakeRoomUnderEveryPolicy) {
  for (const char* policy : {"lru", "arc", "sticky", "s3fifo", "tinylfu"}) {
    SCOPED_TRACE(policy);
    StoreOptions options;
    options.promote_on_read = false;
    options.index.tier_policies[static_cast<size_t>(TierId::kNvme)] = policy;
    tiers_.clear();
    BuildTwoTiers(4, 8, options);
    for (uint64_t n = 1; n <= 12; ++n) ASSERT_TRUE(PutBlock(n).ok());
    for (uint64_t n = 1; n <= 8; ++n) {
      ASSERT_EQ(TierOf(n), TierId::kNvme) << "block " << n;
      ExpectBytes(n);  // read: the policy has seen them reused
    }
    const Store::FlushResult r = store_->FlushToNvme(0);
    EXPECT_EQ(r.written, 4u);
    EXPECT_EQ(r.left, 0u);
    for (uint64_t n = 9; n <= 12; ++n) EXPECT_EQ(TierOf(n), TierId::kNvme) << "block " << n;
    store_.reset();
  }
}

// Blocks of another namespace, kBigBlocks times the size of kNs's, for the tests where one flushed
// block needs the room of many older NVMe blocks.
class StoreFlushBigBlockTest : public StoreFlushTest {
 protected:
  void BuildWithBigBlocks(uint64_t host_blocks, uint64_t nvme_blocks, uint64_t big_blocks,
                          StoreOptions options = {}) {
    options.promote_on_read = false;  // lookups order NVMe's blocks; nothing moves them up
    options.index.tier_policies[static_cast<size_t>(TierId::kNvme)] = "lru";
    BuildTwoTiers(host_blocks, nvme_blocks, options);
    big_bytes_ = big_blocks * kBlock;
    ASSERT_TRUE(store_->RegisterNamespace({kOtherNs, 16, big_bytes_, "big"}).ok());
  }
  Status PutBig(uint64_t n) { return store_->Put(kOtherNs, Key(n), Payload(n, big_bytes_)); }
  // The tier of big block n; TierId::kGpu when it is absent.
  TierId BigTierOf(uint64_t n) {
    std::vector<BlockKey> keys{Key(n)};
    index::LookupResult r = store_->Lookup(kOtherNs, keys);
    return r.ready_prefix == 1 ? r.tiers[0] : TierId::kGpu;
  }
  // Small blocks 1..count, written to NVMe by a first flush: older than anything put after.
  void FillNvmeWithSmallBlocks(uint64_t count) {
    for (uint64_t n = 1; n <= count; ++n) ASSERT_TRUE(PutBlock(n).ok());
    ASSERT_EQ(store_->FlushToNvme(0).written, count);
  }
  uint64_t big_bytes_ = 0;
};

// One flushed block needed more older NVMe blocks dropped than max_evictions_per_allocation (a
// 2 MiB block among 4 KiB values needs 257 even side by side): the flush gave up after dropping
// that many, took the failure for "NVMe is full of newer blocks" and left every block after it.
// It must go on dropping older blocks, least recently used first, until the block fits.
TEST_F(StoreFlushBigBlockTest, ABlockNeedingMoreVictimsThanTheEvictionBoundIsFlushed) {
  StoreOptions options;
  options.max_evictions_per_allocation = 4;
  BuildWithBigBlocks(16, 16, /*big_blocks=*/4, options);
  FillNvmeWithSmallBlocks(16);
  // The flush put block n at offset 16 - n. Look up the ones at even offsets first, then the odd
  // ones: the least recently used blocks lie apart, and a 4-block hole needs 10 of them gone.
  for (uint64_t n = 2; n <= 16; n += 2) ASSERT_TRUE(Cached(n));
  for (uint64_t n = 1; n <= 15; n += 2) ASSERT_TRUE(Cached(n));
  ASSERT_TRUE(PutBig(100).ok());
  const Store::FlushResult r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written, 1u);
  EXPECT_EQ(r.left, 0u);
  EXPECT_FALSE(r.nvme_full);
  EXPECT_EQ(BigTierOf(100), TierId::kNvme);
  // Only the least recently used went: the even ones, then 1 and 3.
  for (uint64_t n = 1; n <= 16; ++n) {
    EXPECT_EQ(Cached(n), n % 2 == 1 && n >= 5) << "block " << n;
  }
}

// When the blocks the flush wrote leave less room than a block needs, dropping older blocks cannot
// help it: they stay, and a later, smaller block still takes the room they give.
TEST_F(StoreFlushBigBlockTest, NoOlderBlockIsDroppedForABlockThatCannotFit) {
  BuildWithBigBlocks(17, 12, /*big_blocks=*/8);
  FillNvmeWithSmallBlocks(12);
  ASSERT_TRUE(PutBlock(50).ok());  // oldest in memory
  ASSERT_TRUE(PutBig(101).ok());
  ASSERT_TRUE(PutBig(102).ok());  // newest
  const Store::FlushResult r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written, 2u);
  EXPECT_EQ(r.left, 1u);
  EXPECT_TRUE(r.nvme_full);
  EXPECT_EQ(BigTierOf(102), TierId::kNvme);
  EXPECT_EQ(BigTierOf(101), TierId::kHost);  // 8 blocks of room: 12 less the 8 of 102
  EXPECT_EQ(TierOf(50), TierId::kNvme);
  uint64_t old_kept = 0;
  for (uint64_t n = 1; n <= 12; ++n) old_kept += Cached(n);
  EXPECT_EQ(old_kept, 3u);  // 12 less 8 for block 102 and 1 for block 50
}

// The same where the tier adds to each block (NVMe: a 4 KiB record header): the room left was
// measured against the block's payload, so a block a little larger than that room dropped every
// older block and still did not fit.
TEST_F(StoreFlushBigBlockTest, NoOlderBlockIsDroppedForABlockWhoseHeaderDoesNotFit) {
  BuildWithBigBlocks(17, 17, /*big_blocks=*/8);
  const uint64_t header = kBlock * 3 / 4;
  nvme().set_block_overhead(header);
  FillNvmeWithSmallBlocks(9);  // 9 x 1.75 blocks of the 17
  ASSERT_TRUE(PutBig(101).ok());
  ASSERT_TRUE(PutBig(102).ok());  // newest
  // 102 takes 8.75 blocks; the 8.25 left hold 101's payload but not its header.
  const Store::FlushResult r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written, 1u);
  EXPECT_EQ(r.left, 1u);
  EXPECT_TRUE(r.nvme_full);
  EXPECT_EQ(BigTierOf(102), TierId::kNvme);
  EXPECT_EQ(BigTierOf(101), TierId::kHost);
  uint64_t old_kept = 0;
  for (uint64_t n = 1; n <= 9; ++n) old_kept += Cached(n);
  EXPECT_EQ(old_kept, 4u);  // 5 of 1.75 blocks made 102's room (with the 1.25 free)
}

// The same shape outside a stop: a demotion into NVMe full of small blocks stopped at
// max_evictions_per_allocation, short of the victims a large block needs, and dropped that block,
// newer than every NVMe block it had evicted. (Here with the fixture above, which builds it.)
TEST_F(StoreFlushBigBlockTest, ADemotionEvictsPastTheBoundForALargeBlock) {
  StoreOptions options;
  options.max_evictions_per_allocation = 4;
  BuildWithBigBlocks(16, 16, /*big_blocks=*/8, options);
  FillNvmeWithSmallBlocks(16);
  ASSERT_TRUE(PutBig(101).ok());
  ASSERT_TRUE(PutBig(102).ok());
  ASSERT_TRUE(PutBig(103).ok());  // the host holds two: 101 goes down, 8 small blocks for it
  EXPECT_EQ(BigTierOf(101), TierId::kNvme);
  uint64_t old_kept = 0;
  for (uint64_t n = 1; n <= 16; ++n) old_kept += Cached(n);
  EXPECT_EQ(old_kept, 8u);
}

// Where the least recently used NVMe blocks lie apart, evicting them one by one leaves holes that
// meet late: here a 8-block hole needed every even block and then 4 odd ones (12 evicted for 8
// blocks of room). After a few single victims the store empties the block's room from the next
// victim on instead (Tier::ReclaimUnit, the NVMe tier's window).
// The blocks in the window are found by a scan of the index, or named by the tier where it can
// (Tier::BlocksStartingIn, as the NVMe tier does): the same blocks either way.
class StoreRoomWindowTest : public StoreFlushBigBlockTest,
                            public ::testing::WithParamInterface<bool> {};

TEST_P(StoreRoomWindowTest, ALargeBlocksRoomIsMadeAroundTheVictimNotAllOverTheTier) {
  StoreOptions options;
  options.max_evictions_per_allocation = 4;
  BuildWithBigBlocks(16, 16, /*big_blocks=*/8, options);
  nvme().set_room_windows(true);
  nvme().set_names_blocks(GetParam());
  FillNvmeWithSmallBlocks(16);
  // Block n lies at offset 16 - n: the even ones are the least recently used, one apart.
  for (uint64_t n = 2; n <= 16; n += 2) ASSERT_TRUE(Cached(n));
  for (uint64_t n = 1; n <= 15; n += 2) ASSERT_TRUE(Cached(n));
  ASSERT_TRUE(PutBig(101).ok());
  ASSERT_TRUE(PutBig(102).ok());
  ASSERT_TRUE(PutBig(103).ok());  // the host holds two: 101 goes down
  EXPECT_EQ(BigTierOf(101), TierId::kNvme);
  // 2, 4, 6 and 8 one by one, then the window of 8 blocks from 10 (offset 6) on: 10, 9, 7, 5, 3.
  for (uint64_t n = 1; n <= 16; ++n) {
    const bool evicted = (n % 2 == 0 && n <= 10) || (n % 2 == 1 && n >= 3 && n <= 9);
    EXPECT_EQ(Cached(n), !evicted) << "block " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(ScannedOrNamed, StoreRoomWindowTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "NamedByTheTier" : "ScannedFromTheIndex";
                         });

// A copy kept on NVMe from a read up holds room a newer block needs: the flush goes newest first,
// so the copy gives way, and its (older) block is written only if room is left for it.
TEST_F(StoreFlushTest, AnOlderBlocksCopyGivesWayToANewerBlock) {
  StoreOptions options;
  options.nvme_copy_share = 0.5;  // one of NVMe's two blocks
  BuildTwoTiers(8, 2, options);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  ASSERT_EQ(store_->FlushToNvme(0).written, 2u);
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());  // read up, its copy kept
  ASSERT_EQ(store_->Stats().blocks_shadowed, 1u);
  ASSERT_TRUE(PutBlock(3).ok());
  ASSERT_TRUE(PutBlock(4).ok());  // memory, newest first: 4, 3, 1
  const Store::FlushResult r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written, 2u);  // 4 in 2's place, 3 in 1's copy's
  EXPECT_EQ(r.already_durable, 0u);
  EXPECT_EQ(r.left, 1u);  // 1, whose copy gave way
  EXPECT_EQ(TierOf(4), TierId::kNvme);
  EXPECT_EQ(TierOf(3), TierId::kNvme);
  EXPECT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(store_->Stats().shadow_bytes, 0u);
  ExpectBytes(1);
}

// Copies that gave way, whose room the earlier block could not use after all (it needs one hole,
// and they lie apart), leave their blocks to be written like the others when their turn comes.
TEST_F(StoreFlushTest, ABlockWhoseCopyGaveWayIsWrittenWhenRoomIsLeft) {
  StoreOptions options;
  options.nvme_copy_share = 0.5;  // two of NVMe's four blocks
  options.index.tier_policies[static_cast<size_t>(TierId::kNvme)] = "lru";
  BuildTwoTiers(8, 4, options);
  const uint64_t big = 2 * kBlock;
  ASSERT_TRUE(store_->RegisterNamespace({kOtherNs, 16, big, "big"}).ok());
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_EQ(store_->FlushToNvme(0).written, 4u);  // block n at offset 4 - n
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(1), out).ok());  // its copy at offset 3
  ASSERT_TRUE(store_->Get(kNs, Key(3), out).ok());  // its copy at offset 1
  ASSERT_EQ(store_->Stats().blocks_shadowed, 2u);
  ASSERT_TRUE(store_->Put(kOtherNs, Key(101), Payload(101, big)).ok());
  // Newest first: 101, then 3 and 1. 101 needs two blocks side by side: 4 and 2 go (offsets 0
  // and 2), then the copies (offsets 3 and 1), which makes one hole of four.
  const Store::FlushResult r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written, 3u);
  EXPECT_EQ(r.left, 0u);
  std::vector<BlockKey> keys{Key(101)};
  EXPECT_EQ(store_->Lookup(kOtherNs, keys).ready_prefix, 1u);
  EXPECT_EQ(TierOf(3), TierId::kNvme);
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  ExpectBytes(1);
  ExpectBytes(3);
}

TEST_F(StoreFlushTest, WriteThroughBlocksMoveIntoTheirCopyWithoutAWrite) {
  StoreOptions options;
  options.nvme_write_through = true;
  BuildTwoTiers(4, 8, options);
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_EQ(nvme().block_writes(), 3u);
  const Store::FlushResult r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written, 0u);
  EXPECT_EQ(r.already_durable, 3u);
  EXPECT_EQ(nvme().block_writes(), 3u);
  for (uint64_t n = 1; n <= 3; ++n) EXPECT_EQ(TierOf(n), TierId::kNvme);
  for (uint64_t n = 1; n <= 3; ++n) ExpectBytes(n);
}

TEST_F(StoreFlushTest, GpuBlocksAreFlushedToo) {
  BuildTwoTiers(4, 8, {}, /*gpu_blocks=*/2);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  ExpectBytes(1);
  ExpectBytes(1);
  ASSERT_EQ(store_->PromoteCandidates(16), 1u);
  ASSERT_EQ(TierOf(1), TierId::kGpu);
  const Store::FlushResult r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written, 2u);
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  EXPECT_EQ(TierOf(2), TierId::kNvme);
  ExpectBytes(1);
}

TEST_F(StoreFlushTest, AStopRequestOrAPassedDeadlineLeavesBlocksWhereTheyAre) {
  BuildTwoTiers(4, 8);
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  std::stop_source stop;
  stop.request_stop();
  Store::FlushResult r = store_->FlushToNvme(0, stop.get_token());
  EXPECT_EQ(r.written, 0u);
  EXPECT_EQ(r.left, 3u);
  r = store_->FlushToNvme(/*deadline_us=*/clock_.NowMicros());
  EXPECT_EQ(r.written, 0u);
  EXPECT_EQ(r.left, 3u);
  for (uint64_t n = 1; n <= 3; ++n) EXPECT_EQ(TierOf(n), TierId::kHost);
  // And they are still in the eviction order: a later flush takes them.
  r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written, 3u);
}

TEST_F(StoreFlushTest, ADeviceErrorLeavesTheBlockInMemory) {
  BuildTwoTiers(4, 8);
  for (uint64_t n = 1; n <= 2; ++n) ASSERT_TRUE(PutBlock(n).ok());
  nvme().set_fail_io(true);
  const Store::FlushResult r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written, 0u);
  EXPECT_EQ(r.left, 2u);
  EXPECT_FALSE(r.nvme_full);
  for (uint64_t n = 1; n <= 2; ++n) EXPECT_EQ(TierOf(n), TierId::kHost);
  nvme().set_fail_io(false);
  for (uint64_t n = 1; n <= 2; ++n) ExpectBytes(n);
}

TEST_F(StoreFlushTest, WithoutNvmeNothingHappens) {
  Build({4});
  ASSERT_TRUE(PutBlock(1).ok());
  const Store::FlushResult r = store_->FlushToNvme(0);
  EXPECT_EQ(r.written + r.left, 0u);
  EXPECT_EQ(TierOf(1), TierId::kHost);
}

}  // namespace
}  // namespace kvtier::store
