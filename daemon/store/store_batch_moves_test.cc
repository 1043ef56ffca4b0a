// Moves in batches: the mover's eviction to a target writes its victims to the tier below as one
// batch, and a fetch for readers reads its blocks up as one; a block that fails in a batch ends
// alone, as it would have alone (dropped when its demotion fails, left where it is when its read
// fails, dropped when its bytes fail verification).
#include <gtest/gtest.h>

#include <thread>

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

class StoreBatchMovesTest : public StoreTest {
 protected:
  // Eight blocks in a host tier of eight, above a tier that is not memory (NVMe's stand-in).
  void BuildFull(StoreOptions options = {}) {
    Build({8, 32}, /*last_addressable=*/false, options);
    for (uint64_t n = 0; n < 8; ++n) ASSERT_TRUE(PutBlock(n).ok());
  }
  bool ReadsBack(uint64_t n) {
    std::vector<std::byte> out;
    return store_->Get(kNs, Key(n), out).ok() && out == Payload(n);
  }
  FakeTier& nvme() { return *tiers_[1]; }
  // `host_blocks` in the host tier above 32 on NVMe's stand-in, with write-through to it and a
  // mover (which the tests play themselves).
  void BuildWriteThrough(uint64_t host_blocks = 8, bool drop_when_disk_lags = false) {
    StoreOptions options;
    options.background_disk_moves = true;
    options.nvme_write_through = true;
    options.drop_when_disk_lags = drop_when_disk_lags;
    Build({host_blocks, 32}, /*last_addressable=*/false, options);
  }
  // A write-through put whose block the watermark demoted (written as cache) before its copy was
  // made, and with `read_up_first` read up again (the NVMe copy kept as its shadow): the
  // write-through makes that copy durable, writes no second one, and the put is acknowledged.
  void ExpectTheCacheCopyMadeDurable(bool read_up_first) {
    BuildWriteThrough();
    uint64_t id = 0;
    ASSERT_TRUE(store_->Put(kNs, Key(0), Payload(0), &id).ok());
    store_->EvictToTarget(TierId::kHost, 0, 8);  // the watermark's demotion comes first
    ASSERT_EQ(TierOf(0), TierId::kNvme);
    if (read_up_first) {
      store_->Fetch(Keys(0, 1));  // for a reader; write-through keeps the NVMe copy
      ASSERT_EQ(TierOf(0), TierId::kHost);
    }
    EXPECT_EQ(nvme().must_survive_count(), 0u) << "written as cache";
    store_->WriteThrough(store_->TakeWriteThroughRequests(8));
    EXPECT_FALSE(store_->WriteThroughPending(id));
    EXPECT_TRUE(store_->TakeWriteThroughOutcome(id).value_or(Internal("pending")).ok());
    EXPECT_EQ(nvme().must_survive_count(), 1u) << "now acknowledged as durable";
    EXPECT_EQ(nvme().block_writes(), 1u) << "no second copy";
    if (read_up_first) EXPECT_TRUE(ReadsBack(0));  // in host: served as it is
  }
  std::vector<BlockKey> Keys(uint64_t from, uint64_t to) {
    std::vector<BlockKey> keys;
    for (uint64_t n = from; n < to; ++n) keys.push_back(Key(n));
    return keys;
  }
};

TEST_F(StoreBatchMovesTest, EvictionToATargetWritesItsVictimsDownInOneBatch) {
  ASSERT_NO_FATAL_FAILURE(BuildFull());
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 2 * kBlock, 8), 6u);
  EXPECT_EQ(nvme().write_batches(), std::vector<size_t>{6});
  const StoreStats s = store_->Stats();
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).demotions, 6u);
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).drops, 0u);
  for (uint64_t n = 0; n < 6; ++n) EXPECT_EQ(TierOf(n), TierId::kNvme) << n;
  for (uint64_t n = 6; n < 8; ++n) EXPECT_EQ(TierOf(n), TierId::kHost) << n;
  for (uint64_t n = 0; n < 8; ++n) EXPECT_TRUE(ReadsBack(n)) << n;
}

TEST_F(StoreBatchMovesTest, ABatchStopsAtItsByteLimitButAlwaysTakesOneBlock) {
  ASSERT_NO_FATAL_FAILURE(BuildFull());
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 0, 8, 3 * kBlock), 3u);
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 0, 8, 1), 1u);
  EXPECT_EQ(nvme().write_batches(), (std::vector<size_t>{3, 1}));
}

TEST_F(StoreBatchMovesTest, AVictimWhoseWriteFailsIsDroppedAndTheOthersGoDown) {
  ASSERT_NO_FATAL_FAILURE(BuildFull());
  nvme().FailBlocksOf(Key(2));
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 0, 8), 8u);
  EXPECT_EQ(nvme().write_batches(), std::vector<size_t>{8});
  const StoreStats s = store_->Stats();
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).demotions, 7u);
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).drops, 1u);
  EXPECT_EQ(TierStatsOf(s, TierId::kNvme).copy_errors, 1u);
  EXPECT_EQ(TierOf(2), TierId::kGpu) << "the block whose copy failed is gone";
  for (uint64_t n : {0, 1, 3, 4, 5, 6, 7}) EXPECT_TRUE(ReadsBack(n)) << n;
}

TEST_F(StoreBatchMovesTest, ALeasedBlockStaysAndTheRestOfTheBatchGoesDown) {
  ASSERT_NO_FATAL_FAILURE(BuildFull());
  Result<Lease> lease = store_->Acquire(kNs, Key(0));
  ASSERT_TRUE(lease.ok());
  store_->EvictToTarget(TierId::kHost, 0, 8);
  EXPECT_EQ(TierOf(0), TierId::kHost);
  for (uint64_t n = 1; n < 8; ++n) EXPECT_EQ(TierOf(n), TierId::kNvme) << n;
  ASSERT_TRUE(store_->Release(lease->id).ok());
}

TEST_F(StoreBatchMovesTest, AFetchReadsItsBlocksUpInOneBatch) {
  ASSERT_NO_FATAL_FAILURE(BuildFull());
  store_->EvictToTarget(TierId::kHost, 0, 8);
  const std::vector<BlockKey> keys = Keys(0, 5);
  store_->Fetch(keys);
  EXPECT_EQ(nvme().read_batches(), std::vector<size_t>{5});
  for (uint64_t n = 0; n < 5; ++n) EXPECT_EQ(TierOf(n), TierId::kHost) << n;
  EXPECT_EQ(TierStatsOf(store_->Stats(), TierId::kNvme).promotions, 5u);
  for (uint64_t n = 0; n < 8; ++n) EXPECT_TRUE(ReadsBack(n)) << n;
}

TEST_F(StoreBatchMovesTest, InAFetchACorruptBlockIsDroppedAndAFailedReadStaysBelowOnce) {
  StoreOptions options;
  options.background_disk_moves = true;
  ASSERT_NO_FATAL_FAILURE(BuildFull(options));
  store_->EvictToTarget(TierId::kHost, 0, 8);
  // Block 0 is the first written to the fake tier, at its offset 0.
  nvme().FlipByte(0);
  nvme().FailBlocksOf(Key(1));
  const std::vector<BlockKey> keys = Keys(0, 4);
  store_->Fetch(keys);
  EXPECT_EQ(nvme().read_batches(), std::vector<size_t>{4});
  EXPECT_EQ(TierOf(0), TierId::kGpu) << "a corrupt block is a miss";
  EXPECT_EQ(TierOf(1), TierId::kNvme) << "a block whose read failed stays where it is";
  EXPECT_EQ(TierOf(2), TierId::kHost);
  EXPECT_EQ(TierOf(3), TierId::kHost);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(TierStatsOf(s, TierId::kNvme).corrupt_drops, 1u);
  EXPECT_EQ(TierStatsOf(s, TierId::kNvme).copy_errors, 1u);
  EXPECT_EQ(TierStatsOf(s, TierId::kNvme).promotions, 2u);
  // Its read fails again, past ReadFailures::kMinGapUs: a bad sector, not a passing fault. It
  // goes instead of failing forever.
  clock_.AdvanceMicros(ReadFailures::kMinGapUs);
  store_->Fetch(Keys(1, 2));
  EXPECT_EQ(TierOf(1), TierId::kGpu);
  EXPECT_EQ(TierStatsOf(store_->Stats(), TierId::kNvme).corrupt_drops, 2u);
}

TEST_F(StoreBatchMovesTest, WithAMoverACommitLeavesItsWriteThroughToIt) {
  BuildWriteThrough();
  std::vector<uint64_t> ids(3);
  for (uint64_t n = 0; n < 3; ++n) {
    ASSERT_TRUE(store_->Put(kNs, Key(n), Payload(n), &ids[n]).ok());
    EXPECT_TRUE(store_->WriteThroughPending(ids[n])) << "written on the committing thread";
  }
  EXPECT_EQ(nvme().block_writes(), 0u);
  // A reader of a block just committed does not keep its copy from being made.
  Result<Lease> lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  store_->WriteThrough(store_->TakeWriteThroughRequests(8));
  ASSERT_TRUE(store_->Release(lease->id).ok());
  EXPECT_EQ(nvme().write_batches(), std::vector<size_t>{3});
  for (uint64_t id : ids) EXPECT_FALSE(store_->WriteThroughPending(id));
  EXPECT_EQ(store_->Stats().write_throughs, 3u);
  // Each copy is its block's shadow: an eviction moves the block into it without a write.
  store_->EvictToTarget(TierId::kHost, 0, 8);
  EXPECT_EQ(nvme().block_writes(), 3u);
  for (uint64_t n = 0; n < 3; ++n) EXPECT_EQ(TierOf(n), TierId::kNvme) << n;
  store_->Fetch(Keys(0, 3));  // as the mover would for a reader
  for (uint64_t n = 0; n < 3; ++n) EXPECT_TRUE(ReadsBack(n)) << n;
}

TEST_F(StoreBatchMovesTest, AWriteThroughOfABlockReplacedMeanwhileIsSkippedAndEndsItsWait) {
  BuildWriteThrough();
  uint64_t id = 0;
  ASSERT_TRUE(store_->Put(kNs, Key(0), Payload(0), &id).ok());
  ASSERT_TRUE(store_->Remove(kNs, Key(0)).ok());
  store_->WriteThrough(store_->TakeWriteThroughRequests(8));
  EXPECT_FALSE(store_->WriteThroughPending(id));
  EXPECT_EQ(nvme().block_writes(), 0u);
  EXPECT_EQ(store_->Stats().write_through_failures, 0u);
}

// Regression: a block whose write-through copy was still queued could be dropped from the host
// tier to make room (drop_when_disk_lags: puts take their room from blocks not yet on NVMe), and
// its put was then told that the block was on NVMe.
TEST_F(StoreBatchMovesTest, AWriteThroughWhoseBlockWasDroppedFirstIsNotAcknowledged) {
  BuildWriteThrough(/*host_blocks=*/1, /*drop_when_disk_lags=*/true);
  uint64_t id = 0;
  ASSERT_TRUE(store_->Put(kNs, Key(0), Payload(0), &id).ok());
  ASSERT_TRUE(store_->WriteThroughPending(id));
  ASSERT_TRUE(store_->Put(kNs, Key(1), Payload(1)).ok()) << "takes block 0's room";
  EXPECT_EQ(TierOf(0), TierId::kGpu) << "absent";
  EXPECT_FALSE(store_->WriteThroughPending(id)) << "its wait ends at once";
  std::optional<Status> outcome = store_->TakeWriteThroughOutcome(id);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->code(), StatusCode::kBusy) << outcome->ToString();
  // The mover finds the request later and nothing to copy; the failure stands.
  store_->WriteThrough(store_->TakeWriteThroughRequests(8));
  EXPECT_EQ(nvme().block_writes(), 1u) << "block 1's copy only";
  EXPECT_EQ(store_->Stats().write_through_failures, 1u);
}

// Regression: a block demoted to NVMe before its write-through copy was made was acknowledged
// with that demotion's copy, which was written as cache: not synced on the acknowledged blocks'
// schedule, so a power cut could take what the put was told is durable.
TEST_F(StoreBatchMovesTest, AWriteThroughWhoseBlockWasDemotedFirstMakesThatCopyDurable) {
  ExpectTheCacheCopyMadeDurable(/*read_up_first=*/false);
}

// Regression: the same, with the block read up again before its write-through came: the copy
// the read kept on NVMe (its shadow, written as cache) was taken for the write-through's copy
// and the put acknowledged without making it one a restart finds.
TEST_F(StoreBatchMovesTest, AWriteThroughWhoseBlockWasDemotedAndReadUpFirstMakesItsCopyDurable) {
  ExpectTheCacheCopyMadeDurable(/*read_up_first=*/true);
}

// Regression: KVT.DROP skips a block the mover has pinned for a copy; when the copy ended the
// block stayed, with its tier space, and came back at the next restart from the NVMe catalog.
TEST_F(StoreBatchMovesTest, ABlockBeingMovedWhenItsNamespaceIsDroppedGoesWhenTheMoveEnds) {
  StoreOptions options;
  options.background_disk_moves = true;
  Build({8, 32}, /*last_addressable=*/false, options);
  ASSERT_TRUE(PutBlock(0).ok());
  ASSERT_TRUE(PutBlock(1).ok());
  store_->EvictToTarget(TierId::kHost, 0, 8);
  ASSERT_EQ(TierOf(0), TierId::kNvme);
  nvme().HoldReads(true);
  std::thread fetch([&] { store_->Fetch(Keys(0, 1)); });  // block 0 read up for a reader
  while (nvme().reads_started() == 0) std::this_thread::yield();
  Result<uint64_t> removed = store_->DropNamespace(kNs);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1u) << "block 1; block 0 is pinned by the move";
  nvme().HoldReads(false);
  fetch.join();
  EXPECT_EQ(store_->Stats().blocks_present, 0u);
  EXPECT_EQ(tiers_[0]->Stats().block_count + nvme().Stats().block_count, 0u) << "space back";
}

// Regression: a write-through copy made while its block waited in a demotion (the copy pins the
// block as a reader does) was forgotten by the move, which decided the shadow from what it had
// picked: the copy's NVMe extent stayed allocated for nobody.
TEST_F(StoreBatchMovesTest, AWriteThroughCopyMadeWhileItsBlockIsBeingDemotedIsKept) {
  BuildWriteThrough();
  uint64_t id = 0;
  ASSERT_TRUE(store_->Put(kNs, Key(0), Payload(0), &id).ok());
  // While the demotion waits for its room on NVMe, the mover's other thread makes the copy.
  nvme().OnNextAllocate([&] { store_->WriteThrough(store_->TakeWriteThroughRequests(8)); });
  store_->EvictToTarget(TierId::kHost, 0, 8);
  EXPECT_FALSE(store_->WriteThroughPending(id));
  EXPECT_EQ(store_->Stats().blocks_shadowed, 1u) << "the copy is the block's shadow";
  // The next eviction moves the block into its copy, writing nothing.
  const uint64_t writes = nvme().block_writes();
  store_->EvictToTarget(TierId::kHost, 0, 8);
  EXPECT_EQ(TierOf(0), TierId::kNvme);
  EXPECT_EQ(nvme().block_writes(), writes);
  store_->Fetch(Keys(0, 1));  // as the mover would for a reader
  EXPECT_TRUE(ReadsBack(0));
  // TearDown: every block the tiers hold is present or a shadow.
}

}  // namespace
}  // namespace kvtier::store
