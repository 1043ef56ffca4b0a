// Placement with a GPU tier (a FakeGpuTier, which like the device pool has no host address) above
// the host tier: puts land in host, reads pick promotion candidates, the GPU mover's
// PromoteCandidates copies them up, GPU pressure demotes back to host (and on down to NVMe), and
// leases, changed blocks and device errors keep every byte served right. The fixture checks the
// accounting identity after each test.
#include <gtest/gtest.h>

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

constexpr uint64_t kWindowUs = 1'000'000;

class StoreGpuTest : public StoreTest {
 protected:
  // A GPU tier of `gpu_blocks` above host (and NVMe-like, when `nvme_blocks` > 0), promoting after
  // `after_reads` reads within kWindowUs.
  void BuildWithGpu(uint64_t gpu_blocks, uint64_t host_blocks, uint64_t nvme_blocks = 0,
                    uint32_t after_reads = 2, StoreOptions options = {}) {
    options.gpu_promotion = {"reads", after_reads, kWindowUs};
    std::vector<uint64_t> below{host_blocks};
    if (nvme_blocks > 0) below.push_back(nvme_blocks);
    Build(below, /*last_addressable=*/nvme_blocks == 0, options, gpu_blocks);
  }

  // The tier of block n, or nullopt when it is not cached.
  std::optional<TierId> TierOf(uint64_t n) {
    std::vector<BlockKey> keys{Key(n)};
    index::LookupResult r = store_->Lookup(kNs, keys);
    if (r.ready_prefix != 1) return std::nullopt;
    return r.tiers[0];
  }

  // Reads block n through the copy-out path and checks its bytes.
  void ExpectBytes(uint64_t n) {
    std::vector<std::byte> out;
    ASSERT_TRUE(store_->Get(kNs, Key(n), out).ok()) << "block " << n;
    EXPECT_EQ(out, Payload(n)) << "block " << n;
  }

  // Puts block n, reads it until it is a candidate, and runs the GPU mover once.
  void PutAndPromote(uint64_t n, uint32_t reads = 2) {
    ASSERT_TRUE(PutBlock(n).ok());
    for (uint32_t i = 0; i < reads; ++i) ExpectBytes(n);
    ASSERT_EQ(store_->PromoteCandidates(16), 1u) << "block " << n;
    ASSERT_EQ(TierOf(n), TierId::kGpu);
  }
};

TEST_F(StoreGpuTest, ReadsOfReadersWithoutThePoolNeverPromote) {
  BuildWithGpu(4, 4);
  ASSERT_TRUE(PutBlock(1).ok());
  for (int i = 0; i < 5; ++i) {
    Result<Lease> lease = store_->Acquire(kNs, Key(1), Store::Reader::kHostMemory);
    ASSERT_TRUE(lease.ok());
    ASSERT_TRUE(store_->Release(lease->id).ok());
  }
  EXPECT_EQ(store_->PendingPromotions(), 0u);
  EXPECT_EQ(store_->PromoteCandidates(16), 0u);
  EXPECT_EQ(TierOf(1), TierId::kHost);
  // Two reads by a client of the pool do.
  for (int i = 0; i < 2; ++i) {
    Result<Lease> lease = store_->Acquire(kNs, Key(1), Store::Reader::kGpuPool);
    ASSERT_TRUE(lease.ok());
    ASSERT_TRUE(store_->Release(lease->id).ok());
  }
  EXPECT_EQ(store_->PromoteCandidates(16), 1u);
  EXPECT_EQ(TierOf(1), TierId::kGpu);
}

TEST_F(StoreGpuTest, ADemotedBlockNeedsAFreshWindowOfReadsToComeBack) {
  BuildWithGpu(1, 4);
  PutAndPromote(1);
  PutAndPromote(2);  // the pool holds one block: 1 goes back to host
  ASSERT_EQ(TierOf(1), TierId::kHost);
  // Its reads before the demotion do not count again: one read is not enough to come back.
  ExpectBytes(1);
  EXPECT_EQ(store_->PromoteCandidates(16), 0u);
  EXPECT_EQ(TierOf(1), TierId::kHost);
  ExpectBytes(1);
  EXPECT_EQ(store_->PromoteCandidates(16), 1u);
  EXPECT_EQ(TierOf(1), TierId::kGpu);
  EXPECT_EQ(TierOf(2), TierId::kHost);
}

TEST_F(StoreGpuTest, PutsLandInHostNeverInTheGpu) {
  BuildWithGpu(4, 2);
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  // The host tier was full: its oldest block went (there is nothing below), not up to the GPU.
  EXPECT_EQ(TierOf(1), std::nullopt);
  EXPECT_EQ(TierOf(2), TierId::kHost);
  EXPECT_EQ(TierOf(3), TierId::kHost);
  EXPECT_EQ(gpu_->Stats().block_count, 0u);
  Result<Reservation> r = store_->BeginPut(kNs, Key(9), kBlock);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tier, TierId::kHost);
  EXPECT_NE(r->address, nullptr);
  ASSERT_TRUE(store_->AbortPut(r->id).ok());
}

TEST_F(StoreGpuTest, ABlockReadNTimesWithinTheWindowMovesUpOnlyWhenTheMoverRuns) {
  BuildWithGpu(4, 8, 0, /*after_reads=*/3);
  ASSERT_TRUE(PutBlock(1).ok());
  ExpectBytes(1);
  clock_.AdvanceMicros(kWindowUs / 2);
  ExpectBytes(1);
  EXPECT_EQ(store_->PendingPromotions(), 0u);
  ExpectBytes(1);
  EXPECT_EQ(store_->PendingPromotions(), 1u);
  // The read only recorded a candidate: nothing moved on the reader's thread.
  EXPECT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(store_->PromoteCandidates(16), 1u);
  EXPECT_EQ(TierOf(1), TierId::kGpu);
  // Tiers are exclusive: the host copy is gone.
  EXPECT_EQ(tiers_[0]->Stats().block_count, 0u);
  EXPECT_EQ(gpu_->Stats().block_count, 1u);
  ExpectBytes(1);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).promotions, 1u);
  EXPECT_EQ(s.gpu_candidates, 1u);
  EXPECT_EQ(s.pending_promotions, 0u);
}

TEST_F(StoreGpuTest, ReadsSpreadBeyondTheWindowPromoteNothing) {
  BuildWithGpu(4, 8, 0, /*after_reads=*/2);
  ASSERT_TRUE(PutBlock(1).ok());
  for (int i = 0; i < 5; ++i) {
    ExpectBytes(1);
    clock_.AdvanceMicros(kWindowUs + 1);
  }
  EXPECT_EQ(store_->PendingPromotions(), 0u);
  EXPECT_EQ(store_->PromoteCandidates(16), 0u);
  EXPECT_EQ(TierOf(1), TierId::kHost);
}

TEST_F(StoreGpuTest, LookupsAloneDoNotCountAsReads) {
  BuildWithGpu(4, 8, 0, /*after_reads=*/1);
  ASSERT_TRUE(PutBlock(1).ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(store_->PendingPromotions(), 0u);
}

TEST_F(StoreGpuTest, AGpuBlockIsLeasedWithoutAnAddressAndReadInPlace) {
  BuildWithGpu(4, 8);
  PutAndPromote(1);
  std::vector<BlockKey> keys{Key(1)};
  index::LookupResult r = store_->Lookup(kNs, keys);
  ASSERT_EQ(r.ready_prefix, 1u);
  EXPECT_EQ(r.tiers[0], TierId::kGpu);
  Result<Lease> lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->tier, TierId::kGpu);
  EXPECT_EQ(lease->address, nullptr);
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(store_->ReadLeased(*lease, out).ok());
  EXPECT_EQ(out, Payload(1));
  ASSERT_TRUE(store_->Release(lease->id).ok());
  // Reads of a GPU block record nothing more.
  EXPECT_EQ(store_->PendingPromotions(), 0u);
}

TEST_F(StoreGpuTest, GpuPressureDemotesTheLeastRecentlyUsedBlockToHostWithItsBytes) {
  BuildWithGpu(2, 8);
  PutAndPromote(1);
  PutAndPromote(2);
  ASSERT_EQ(TierOf(1), TierId::kGpu);  // a lookup: 2 is now the least recently used GPU block
  PutAndPromote(3);
  EXPECT_EQ(TierOf(1), TierId::kGpu);
  EXPECT_EQ(TierOf(2), TierId::kHost);
  EXPECT_EQ(TierOf(3), TierId::kGpu);
  for (uint64_t n = 1; n <= 3; ++n) ExpectBytes(n);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(TierStatsOf(s, TierId::kGpu).demotions, 1u);
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).promotions, 3u);
  EXPECT_EQ(s.evicted_blocks, 0u);
}

TEST_F(StoreGpuTest, GpuPressureContinuesDownToNvme) {
  BuildWithGpu(1, 2, 8);
  PutAndPromote(1);
  ASSERT_TRUE(PutBlock(2).ok());
  ASSERT_TRUE(PutBlock(3).ok());
  for (int i = 0; i < 2; ++i) ExpectBytes(3);
  // 3 moves up, so 1 comes down into a full host tier, whose oldest block (2) goes to NVMe.
  ASSERT_EQ(store_->PromoteCandidates(16), 1u);
  EXPECT_EQ(TierOf(3), TierId::kGpu);
  EXPECT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(TierOf(2), TierId::kNvme);
  for (uint64_t n = 1; n <= 3; ++n) ExpectBytes(n);
}

TEST_F(StoreGpuTest, ALeasedCandidateWaitsForItsReaderThenMoves) {
  BuildWithGpu(4, 8);
  ASSERT_TRUE(PutBlock(1).ok());
  ExpectBytes(1);
  Result<Lease> lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  ASSERT_EQ(store_->PendingPromotions(), 1u);
  EXPECT_EQ(store_->PromoteCandidates(16), 0u);  // a reader copies out of its host slot
  EXPECT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(store_->PendingPromotions(), 1u);  // back in the queue for the mover's next run
  EXPECT_EQ(std::vector<std::byte>(lease->address, lease->address + kBlock), Payload(1));
  ASSERT_TRUE(store_->Release(lease->id).ok());
  EXPECT_EQ(store_->PromoteCandidates(16), 1u);
  EXPECT_EQ(TierOf(1), TierId::kGpu);
  EXPECT_EQ(store_->Stats().gpu_promotions_skipped, 0u);
}

TEST_F(StoreGpuTest, ACandidateLeasedForLongIsSkippedAndOfferedAgainByItsNextRead) {
  BuildWithGpu(4, 8);
  ASSERT_TRUE(PutBlock(1).ok());
  ExpectBytes(1);
  Result<Lease> lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  int runs = 0;
  while (store_->PendingPromotions() > 0 && runs < 100) {
    EXPECT_EQ(store_->PromoteCandidates(16), 0u);
    ++runs;
  }
  EXPECT_EQ(runs, 9);  // the first try and eight more
  EXPECT_EQ(store_->Stats().gpu_promotions_skipped, 1u);
  ASSERT_TRUE(store_->Release(lease->id).ok());
  ExpectBytes(1);
  EXPECT_EQ(store_->PromoteCandidates(16), 1u);
  EXPECT_EQ(TierOf(1), TierId::kGpu);
}

TEST_F(StoreGpuTest, ALeasedGpuBlockIsNotDemoted) {
  BuildWithGpu(1, 8);
  PutAndPromote(1);
  Result<Lease> lease = store_->Acquire(kNs, Key(1));
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(PutBlock(2).ok());
  for (int i = 0; i < 2; ++i) ExpectBytes(2);
  EXPECT_EQ(store_->PromoteCandidates(16), 0u);  // no room: the only GPU block is leased
  EXPECT_EQ(TierOf(1), TierId::kGpu);
  EXPECT_EQ(TierOf(2), TierId::kHost);
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(store_->ReadLeased(*lease, out).ok());
  EXPECT_EQ(out, Payload(1));
  ASSERT_TRUE(store_->Release(lease->id).ok());
  ExpectBytes(2);
  EXPECT_EQ(store_->PromoteCandidates(16), 1u);
  EXPECT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(TierOf(2), TierId::kGpu);
}

TEST_F(StoreGpuTest, ACandidateReplacedSinceItsReadsIsSkipped) {
  BuildWithGpu(4, 8);
  ASSERT_TRUE(PutBlock(1).ok());
  for (int i = 0; i < 2; ++i) ExpectBytes(1);
  ASSERT_EQ(store_->PendingPromotions(), 1u);
  ASSERT_TRUE(store_->Remove(kNs, Key(1)).ok());
  ASSERT_TRUE(PutBlock(1).ok());  // a new incarnation, never read
  EXPECT_EQ(store_->PromoteCandidates(16), 0u);
  EXPECT_EQ(TierOf(1), TierId::kHost);
  ExpectBytes(1);
}

TEST_F(StoreGpuTest, ADeviceErrorOnPromotionLeavesTheBlockInHost) {
  BuildWithGpu(4, 8);
  ASSERT_TRUE(PutBlock(1).ok());
  for (int i = 0; i < 2; ++i) ExpectBytes(1);
  gpu_->FailNextCopies(1);
  EXPECT_EQ(store_->PromoteCandidates(16), 0u);
  EXPECT_EQ(TierOf(1), TierId::kHost);
  ExpectBytes(1);
  EXPECT_EQ(gpu_->Stats().block_count, 0u);  // the slot it was to take is free again
  const StoreStats s = store_->Stats();
  EXPECT_EQ(TierStatsOf(s, TierId::kGpu).copy_errors, 1u);
  EXPECT_EQ(TierStatsOf(s, TierId::kHost).copy_errors, 0u);
  EXPECT_EQ(s.gpu_promotions_skipped, 1u);
  // The device recovers: the next read offers the block again.
  ExpectBytes(1);
  EXPECT_EQ(store_->PromoteCandidates(16), 1u);
  ExpectBytes(1);
}

TEST_F(StoreGpuTest, ADeviceErrorOnDemotionDropsTheVictimAndServesNoWrongBytes) {
  BuildWithGpu(1, 8);
  PutAndPromote(1);
  ASSERT_TRUE(PutBlock(2).ok());
  for (int i = 0; i < 2; ++i) ExpectBytes(2);
  gpu_->FailNextCopies(1);  // the read of victim 1 out of the GPU
  EXPECT_EQ(store_->PromoteCandidates(16), 1u);
  EXPECT_EQ(TierOf(2), TierId::kGpu);
  ExpectBytes(2);
  EXPECT_EQ(TierOf(1), std::nullopt);  // a miss, never wrong bytes
  std::vector<std::byte> out;
  EXPECT_EQ(store_->Get(kNs, Key(1), out).code(), StatusCode::kNotFound);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(TierStatsOf(s, TierId::kGpu).copy_errors, 1u);
  EXPECT_EQ(TierStatsOf(s, TierId::kGpu).drops, 1u);
  EXPECT_EQ(s.evicted_blocks, 1u);
  EXPECT_EQ(tiers_[0]->Stats().block_count, 0u);  // the host slot it was to take is free again
}

TEST_F(StoreGpuTest, AWriteThroughShadowStaysWithTheBlockInTheGpu) {
  StoreOptions options;
  options.nvme_write_through = true;
  BuildWithGpu(1, 2, 8, 2, options);
  PutAndPromote(1);
  FakeTier& nvme = *tiers_[1];
  EXPECT_EQ(store_->Stats().blocks_shadowed, 1u);
  EXPECT_EQ(nvme.Stats().block_count, 1u);  // the put's copy survives a crash while on the GPU
  const uint64_t writes = nvme.block_writes();
  // 2 and 3 fill host; 3 moves up, 1 comes down into host, pushing 2 into its own shadow; then 4
  // and 5 push 1 into its shadow. No block is written to NVMe twice.
  ASSERT_TRUE(PutBlock(2).ok());
  ASSERT_TRUE(PutBlock(3).ok());
  for (int i = 0; i < 2; ++i) ExpectBytes(3);
  ASSERT_EQ(store_->PromoteCandidates(16), 1u);
  EXPECT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(TierOf(2), TierId::kNvme);
  ASSERT_TRUE(PutBlock(4).ok());
  ASSERT_TRUE(PutBlock(5).ok());
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  EXPECT_EQ(TierOf(3), TierId::kGpu);
  EXPECT_EQ(nvme.block_writes(), writes + 4);  // the write-throughs of 2, 3, 4 and 5 only
  for (uint64_t n = 1; n <= 5; ++n) ExpectBytes(n);
}

// Regression: a GPU victim that the host tier could not take (full, its only block the candidate
// being moved up) was dropped, and its durable write-through copy on NVMe freed with it. It now
// moves into that copy: an index change, no write.
TEST_F(StoreGpuTest, AGpuVictimTheHostCannotTakeMovesIntoItsCopyOnNvme) {
  StoreOptions options;
  options.nvme_write_through = true;
  BuildWithGpu(1, 1, 8, 2, options);
  PutAndPromote(1);
  FakeTier& nvme = *tiers_[1];
  const uint64_t writes = nvme.block_writes();
  ASSERT_TRUE(PutBlock(2).ok());
  for (int i = 0; i < 2; ++i) ExpectBytes(2);
  store_->PromoteCandidates(16);
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  EXPECT_EQ(nvme.block_writes(), writes + 1) << "block 2's write-through only";
  EXPECT_EQ(TierStatsOf(store_->Stats(), TierId::kGpu).drops, 0u);
  ExpectBytes(1);
  ExpectBytes(2);
}

TEST_F(StoreGpuTest, AFullCandidateQueueRefusesAndCounts) {
  StoreOptions options;
  options.max_promotion_candidates = 1;
  BuildWithGpu(4, 8, 0, /*after_reads=*/1, options);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());
  ExpectBytes(1);
  ExpectBytes(1);  // already queued: no second entry, nothing dropped
  ExpectBytes(2);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.gpu_candidates, 1u);
  EXPECT_EQ(s.gpu_candidates_dropped, 1u);
  EXPECT_EQ(store_->PromoteCandidates(16), 1u);
  ExpectBytes(2);  // offered again by its next read
  EXPECT_EQ(store_->PromoteCandidates(16), 1u);
  EXPECT_EQ(TierOf(2), TierId::kGpu);
}

TEST_F(StoreGpuTest, PromotionOffKeepsTheGpuEmpty) {
  StoreOptions options;
  options.gpu_promotion = {"off", 1, kWindowUs};
  Build({8}, true, options, /*gpu_blocks=*/4);
  ASSERT_TRUE(PutBlock(1).ok());
  for (int i = 0; i < 5; ++i) ExpectBytes(1);
  EXPECT_EQ(store_->PendingPromotions(), 0u);
  EXPECT_EQ(store_->PromoteCandidates(16), 0u);
}

TEST_F(StoreGpuTest, WithoutAGpuTierNothingIsRecorded) {
  Build({8});
  ASSERT_TRUE(PutBlock(1).ok());
  for (int i = 0; i < 5; ++i) ExpectBytes(1);
  EXPECT_EQ(store_->PendingPromotions(), 0u);
  EXPECT_EQ(store_->PromoteCandidates(16), 0u);
}

TEST_F(StoreGpuTest, ADroppedNamespaceIsNotPromoted) {
  BuildWithGpu(4, 8);
  ASSERT_TRUE(PutBlock(1).ok());
  for (int i = 0; i < 2; ++i) ExpectBytes(1);
  ASSERT_TRUE(store_->DropNamespace(kNs).ok());
  EXPECT_EQ(store_->PromoteCandidates(16), 0u);
  EXPECT_EQ(gpu_->Stats().block_count, 0u);
}

TEST(StoreGpuChainTest, TheGpuTierMustComeFirstWithHostRightBelow) {
  FakeClock clock;
  auto gpu = tiers::FakeGpuTier::Create({.fake = true, .capacity_bytes = 4 * kBlock});
  ASSERT_TRUE(gpu.ok());
  kvtier::testing::FakeTier host(TierId::kHost, 4 * kBlock);
  kvtier::testing::FakeTier nvme(TierId::kNvme, 4 * kBlock, false);
  using Chain = std::vector<tiers::Tier*>;
  for (const Chain& bad : {Chain{gpu->get()}, Chain{&host, gpu->get()},
                           Chain{gpu->get(), &nvme, &host}, Chain{gpu->get(), &nvme}}) {
    EXPECT_EQ(Store::Create({}, bad, clock).status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(Store::Create({}, {gpu->get(), &host}, clock).ok());
  EXPECT_TRUE(Store::Create({}, {gpu->get(), &host, &nvme}, clock).ok());
  StoreOptions bad_policy;
  bad_policy.gpu_promotion.after_reads = 0;
  EXPECT_EQ(Store::Create(bad_policy, {gpu->get(), &host}, clock).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::store
