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
