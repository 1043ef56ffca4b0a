// The TierMover with a store that leaves disk moves to it: puts past a full host tier wait for
// room the mover makes, reads of NVMe blocks wait for the mover to bring them up (or, when it
// cannot, miss it), and the watermarks keep room ahead of demand.
#include "daemon/mover/tier_mover.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/store/store_test_fixture.h"
#include "tests/fakes/fake_remote_store.h"

namespace kvtier::mover {
namespace {

using store::Lease;
using store::Reservation;
using store::StoreOptions;
using store::testing::kBlock;
using store::testing::Key;
using store::testing::kNs;
using store::testing::Payload;

class TierMoverTest : public store::testing::StoreTest {
 protected:
  // `drop_when_disk_lags` false (the default): puts wait for the mover's room.
  void BuildTwoTiers(uint64_t host_blocks, uint64_t nvme_blocks, bool drop_when_disk_lags = false) {
    StoreOptions options;
    options.background_disk_moves = true;
    options.drop_when_disk_lags = drop_when_disk_lags;
    Build({host_blocks, nvme_blocks}, /*last_addressable=*/false, options);
  }
  void StartMover(TierMover::Options o = {}, size_t threads = 2) {
    o.threads = threads;
    o.tick = std::chrono::milliseconds(5);
    mover_ = std::make_unique<TierMover>(*store_, o);
    store_->SetMoverWakeup([m = mover_.get()] { m->Wake(); });
  }
  void StartMoverWithWatermarks(double high, double low, size_t threads = 2) {
    TierMover::Options o;
    o.high_watermark = high;
    o.low_watermark = low;
    StartMover(o, threads);
  }
  // The mover works on its own threads: waits up to 10 s for it to bring the host tier down.
  void WaitUntilHostHoldsAtMost(uint64_t bytes) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (store_->tier(TierId::kHost)->Stats().used_bytes > bytes &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void TearDown() override {
    mover_.reset();
    StoreTest::TearDown();
  }
  // Calls `attempt` until it answers something other than kPending, for up to 10 s: the mover
  // works on its own threads.
  Status UntilNotPending(const std::function<Status()>& attempt) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    Status st = attempt();
    while (st.code() == StatusCode::kPending && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      st = attempt();
    }
    return st;
  }
  Result<Lease> AcquireWhenReady(uint64_t n) {
    Result<Lease> lease = NotFound("not tried");
    (void)UntilNotPending([&] {
      lease = store_->Acquire(kNs, Key(n), store::Store::Reader::kHostMemory);
      return lease.status();
    });
    return lease;
  }
  // Whether block n is on NVMe within 10 s. The put that needed room may find it before the
  // mover has finished moving the first victim: two threads pick victims together, and the
  // second one's move may end first.
  bool EventuallyOnNvme(uint64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (TierOf(n) != TierId::kNvme && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return TierOf(n) == TierId::kNvme;
  }
  testing::FakeTier& nvme() { return *tiers_.back(); }

  // Before mover_: the mover's threads may call it until TearDown stops them.
  kvtier::testing::FakeRemoteStore remote_;
  std::unique_ptr<TierMover> mover_;
};

// The nice values of this process's threads named kvtier-mover-*, read from /proc.
std::vector<int> MoverThreadNiceValues() {
  std::vector<int> nice;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (!std::getline(comm, name) || name.rfind("kvtier-mover-", 0) != 0) continue;
    errno = 0;
    const int value = getpriority(PRIO_PROCESS, std::stoi(task.path().filename().string()));
    if (errno == 0) nice.push_back(value);
  }
  return nice;
}

// Waits up to 10 s for `threads` mover threads that all have the nice value `want`.
bool MoverThreadsEventuallyAt(size_t threads, int want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const std::vector<int> nice = MoverThreadNiceValues();
    if (nice.size() == threads &&
        std::all_of(nice.begin(), nice.end(), [&](int v) { return v == want; })) {
      return true;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST_F(TierMoverTest, TheMoverThreadsRunAtTheLowestCpuPriorityUnlessToldNotTo) {
  BuildTwoTiers(4, 16);
  errno = 0;
  const int own = getpriority(PRIO_PROCESS, 0);
  ASSERT_EQ(errno, 0);
  StartMover({}, /*threads=*/3);
  EXPECT_TRUE(MoverThreadsEventuallyAt(3, 19));
  mover_.reset();

  TierMover::Options normal;
  normal.low_cpu_priority = false;
  StartMover(normal, /*threads=*/2);
  EXPECT_TRUE(MoverThreadsEventuallyAt(2, own));
  // Only the mover's own threads were lowered.
  EXPECT_EQ(getpriority(PRIO_PROCESS, 0), own);
}

TEST_F(TierMoverTest, APutPastAFullHostTierWaitsForRoomInsteadOfWritingToDisk) {
  BuildTwoTiers(4, 16);
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  // No mover yet: the put must not demote a victim itself.
  EXPECT_EQ(store_->BeginPut(kNs, Key(5), kBlock).status().code(), StatusCode::kPending);
  EXPECT_EQ(nvme().block_writes(), 0u);
  EXPECT_TRUE(store_->MoveWorkPending());
  StartMover();
  mover_->Wake();
  ASSERT_TRUE(UntilNotPending([&] { return PutBlock(5); }).ok());
  EXPECT_GE(nvme().block_writes(), 1u);
  EXPECT_TRUE(EventuallyOnNvme(1));  // the least recently used went down
  EXPECT_EQ(TierOf(5), TierId::kHost);
}

TEST_F(TierMoverTest, APutThatOutrunsTheMoverDropsTheColdestBlockInsteadOfWaiting) {
  BuildTwoTiers(4, 16, /*drop_when_disk_lags=*/true);
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  // No mover: the put neither waits nor writes to NVMe; block 1, the coldest, makes its room.
  ASSERT_TRUE(PutBlock(5).ok());
  EXPECT_EQ(nvme().block_writes(), 0u);
  EXPECT_FALSE(Cached(1));
  for (uint64_t n = 2; n <= 5; ++n) EXPECT_EQ(TierOf(n), TierId::kHost) << n;
  const store::StoreStats s = store_->Stats();
  EXPECT_EQ(s.tiers[0].lag_drops, 1u);
  EXPECT_EQ(s.tiers[0].demotions, 0u);
  // The mover was still asked for room: it writes the cold end at the disk's pace meanwhile.
  EXPECT_TRUE(store_->MoveWorkPending());
}

TEST_F(TierMoverTest, APutThatOutrunsTheMoverMovesAWriteThroughBlockIntoItsCopy) {
  StoreOptions options;
  options.background_disk_moves = true;
  options.drop_when_disk_lags = true;
  options.nvme_write_through = true;
  Build({4, 16}, /*last_addressable=*/false, options);
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  // No mover runs here: the test makes the write-throughs itself, as the mover would.
  store_->WriteThrough(store_->TakeWriteThroughRequests(16));
  const uint64_t writes = nvme().block_writes();
  ASSERT_TRUE(PutBlock(5).ok());
  // Block 1 already had its bytes on NVMe: it left the host tier for them, with no write.
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  store_->WriteThrough(store_->TakeWriteThroughRequests(16));
  EXPECT_EQ(nvme().block_writes(), writes + 1);  // block 5's own write-through
  EXPECT_EQ(store_->Stats().tiers[0].lag_drops, 0u);
}

TEST_F(TierMoverTest, TheMoverWritesCommittedBlocksThroughAndEndsTheirWait) {
  StoreOptions options;
  options.background_disk_moves = true;
  options.nvme_write_through = true;
  Build({8, 16}, /*last_addressable=*/false, options);
  StartMover();
  std::vector<uint64_t> reservations(4);
  for (uint64_t n = 0; n < 4; ++n) {
    ASSERT_TRUE(store_->Put(kNs, Key(n), Payload(n), &reservations[n]).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (uint64_t id : reservations) {
    while (store_->WriteThroughPending(id) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_FALSE(store_->WriteThroughPending(id));
  }
  EXPECT_EQ(store_->Stats().write_throughs, 4u);
  EXPECT_EQ(nvme().block_writes(), 4u);
}

TEST_F(TierMoverTest, AReadOfAnNvmeBlockWaitsForTheMoverToBringItUp) {
  BuildTwoTiers(2, 16);
  StartMover();
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(UntilNotPending([&] { return PutBlock(n); }).ok());
  ASSERT_TRUE(EventuallyOnNvme(1));
  Result<Lease> lease = AcquireWhenReady(1);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->tier, TierId::kHost);
  ASSERT_NE(lease->address, nullptr);
  EXPECT_EQ(std::vector<std::byte>(lease->address, lease->address + kBlock), Payload(1));
  ASSERT_TRUE(store_->Release(lease->id).ok());
}

// Reading it where it lies would put a disk read on the caller's (network) thread: a miss, which
// the engine recomputes. The block stays, and the next read asks the mover again.
TEST_F(TierMoverTest, ABlockTheMoverCannotBringUpIsAMissAndIsAskedForAgainLater) {
  BuildTwoTiers(2, 16);
  StartMover();
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(UntilNotPending([&] { return PutBlock(n); }).ok());
  ASSERT_TRUE(EventuallyOnNvme(1));
  nvme().set_fail_io(true);  // the fetch's read fails: the block stays on NVMe
  Result<Lease> lease = AcquireWhenReady(1);
  EXPECT_EQ(lease.status().code(), StatusCode::kNotFound) << lease.status().ToString();
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  nvme().set_fail_io(false);
  lease = AcquireWhenReady(1);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->tier, TierId::kHost);
  EXPECT_EQ(std::vector<std::byte>(lease->address, lease->address + kBlock), Payload(1));
  ASSERT_TRUE(store_->Release(lease->id).ok());
}

TEST_F(TierMoverTest, TheWatermarksKeepRoomAheadOfThePuts) {
  BuildTwoTiers(10, 32);
  // One thread: which blocks go, and how many, is then the watermarks' alone. (Two threads pick
  // concurrently, each counting what the other has picked; the store stressor covers that.)
  StartMoverWithWatermarks(0.75, 0.5, /*threads=*/1);
  for (uint64_t n = 1; n <= 8; ++n) ASSERT_TRUE(UntilNotPending([&] { return PutBlock(n); }).ok());
  // 8 of 10 blocks is past the high watermark: the mover brings the tier down to 5.
  WaitUntilHostHoldsAtMost(5 * kBlock);
  // Stopped (its threads joined) before the tiers are read: a round still under way would move
  // blocks while they are looked at.
  mover_.reset();
  const uint64_t host_used = store_->tier(TierId::kHost)->Stats().used_bytes;
  EXPECT_LE(host_used, 5 * kBlock);
  EXPECT_EQ(host_used, 5 * kBlock);  // one thread: exactly down to the low watermark
  EXPECT_EQ(TierOf(1), TierId::kNvme);
  EXPECT_EQ(TierOf(8), TierId::kHost);
  // Nothing was lost on the way.
  StartMover();
  for (uint64_t n = 1; n <= 8; ++n) {
    Result<Lease> lease = AcquireWhenReady(n);
    ASSERT_TRUE(lease.ok()) << "block " << n << ": " << lease.status().ToString();
    std::vector<std::byte> got(kBlock);
    if (lease->address != nullptr) {
      got.assign(lease->address, lease->address + kBlock);
    } else {
      ASSERT_TRUE(store_->ReadLeased(*lease, got).ok());
    }
    EXPECT_EQ(got, Payload(n)) << "block " << n;
    ASSERT_TRUE(store_->Release(lease->id).ok());
  }
}

// Reads first: a read queued behind a deep queue of demotion writes waits for all of them. While
// a reader waits, the watermark work goes on one block at a time; when the read is done, in
// batches again.
TEST_F(TierMoverTest, WhileAReaderWaitsTheMoverDemotesOneBlockAtATime) {
  BuildTwoTiers(24, 64);
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  // Blocks 1-4 down to NVMe, by hand: no mover runs yet.
  ASSERT_EQ(store_->EvictToTarget(TierId::kHost, 0, 4, 4 * kBlock), 4u);
  ASSERT_EQ(TierOf(1), TierId::kNvme);
  for (uint64_t n = 5; n <= 24; ++n) ASSERT_TRUE(PutBlock(n).ok());  // 20 of 24: above 0.75
  nvme().HoldReads(true);
  // The read asks the mover for block 1 before the mover starts: its first round takes the
  // fetch, and the read is held there while the other threads look at the watermarks.
  EXPECT_EQ(store_->Acquire(kNs, Key(1), store::Store::Reader::kHostMemory).status().code(),
            StatusCode::kPending);
  StartMoverWithWatermarks(0.75, 0.25, /*threads=*/4);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (nvme().reads_started() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(nvme().reads_started(), 1u);
  // The tier goes down to the low watermark (6 blocks) while the read is held, one block per
  // batch. Block 1's room counts too: 7 blocks when the read took it only after the tier was down
  // (the drain then stopped at 6 without it).
  WaitUntilHostHoldsAtMost(7 * kBlock);
  EXPECT_LE(store_->tier(TierId::kHost)->Stats().used_bytes, 7 * kBlock);
  const std::vector<size_t> while_reading = nvme().write_batches();
  ASSERT_GT(while_reading.size(), 1u);  // the one demotion by hand, then the mover's
  for (size_t i = 1; i < while_reading.size(); ++i) EXPECT_EQ(while_reading[i], 1u) << i;
  nvme().HoldReads(false);
  Result<Lease> lease = AcquireWhenReady(1);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(std::vector<std::byte>(lease->address, lease->address + kBlock), Payload(1));
  ASSERT_TRUE(store_->Release(lease->id).ok());
  // No reader now: the next demotions go in batches again.
  for (uint64_t n = 25; n <= 40; ++n) {
    ASSERT_TRUE(UntilNotPending([&] { return PutBlock(n); }).ok());
  }
  WaitUntilHostHoldsAtMost(6 * kBlock);
  mover_.reset();
  const std::vector<size_t> after = nvme().write_batches();
  size_t largest = 0;
  for (size_t i = while_reading.size(); i < after.size(); ++i) {
    largest = std::max(largest, after[i]);
  }
  EXPECT_GT(largest, 1u);
}

// The write depth is shared: with room for four blocks in flight and two threads, no batch of
// demotions is larger than two blocks (each thread's share), however far the tier is to go.
TEST_F(TierMoverTest, TheThreadsShareTheWriteDepth) {
  BuildTwoTiers(32, 64);
  for (uint64_t n = 1; n <= 32; ++n) ASSERT_TRUE(PutBlock(n).ok());
  TierMover::Options o;
  o.high_watermark = 0.5;
  o.low_watermark = 0.1;
  o.write_depth_bytes = 4 * kBlock;
  StartMover(o, /*threads=*/2);
  WaitUntilHostHoldsAtMost(3 * kBlock);
  mover_.reset();
  const std::vector<size_t> batches = nvme().write_batches();
  ASSERT_FALSE(batches.empty());
  EXPECT_EQ(*std::max_element(batches.begin(), batches.end()), 2u);
  // Each block went down once, and nothing was lost.
  size_t written = 0;
  for (size_t b : batches) written += b;
  EXPECT_EQ(written, 32u - store_->tier(TierId::kHost)->Stats().used_bytes / kBlock);
}

// With drop_when_disk_lags, room for a block read up is made as a put's room is: the coldest host
// block is dropped, so the read does not wait for that block's write first. With `wait` it is
// demoted, as before.
class FetchRoomTest : public TierMoverTest, public ::testing::WithParamInterface<bool> {};

TEST_P(FetchRoomTest, AFetchIntoAFullHostTierDropsTheColdestBlockOnlyWhenDiskLagsIsDrop) {
  const bool drop = GetParam();
  BuildTwoTiers(2, 16, drop);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_EQ(store_->EvictToTarget(TierId::kHost, 0, 1, kBlock), 1u);
  ASSERT_TRUE(PutBlock(2).ok());
  ASSERT_TRUE(PutBlock(3).ok());  // the host tier is full; block 2 is its coldest
  const uint64_t writes = nvme().block_writes();
  // No mover runs here: the test takes the fetch and makes it, as the mover would.
  EXPECT_EQ(store_->Acquire(kNs, Key(1), store::Store::Reader::kHostMemory).status().code(),
            StatusCode::kPending);
  store_->Fetch(store_->TakeFetchRequests(8));
  EXPECT_EQ(TierOf(1), TierId::kHost);
  EXPECT_EQ(nvme().block_writes(), drop ? writes : writes + 1);
  EXPECT_EQ(Cached(2), !drop);
  EXPECT_EQ(store_->Stats().tiers[0].lag_drops, drop ? 1u : 0u);
}

INSTANTIATE_TEST_SUITE_P(WhenDiskLags, FetchRoomTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Drop" : "Wait";
                         });

// Without NVMe, a remote tier below host: the watermarks publish the coldest host blocks and drop
// them, and a read of one of them waits for the mover to fetch it back.
TEST_F(TierMoverTest, WithARemoteTierTheWatermarksPublishAndReadsFetchBack) {
  StoreOptions options;
  options.background_disk_moves = true;
  options.remote.store = &remote_;
  Build({10}, /*last_addressable=*/true, options);
  StartMoverWithWatermarks(0.75, 0.5);
  for (uint64_t n = 1; n <= 8; ++n) ASSERT_TRUE(UntilNotPending([&] { return PutBlock(n); }).ok());
  WaitUntilHostHoldsAtMost(5 * kBlock);
  EXPECT_EQ(store_->Stats().remote_publishes, store_->Stats().evicted_blocks);
  // Which blocks the two mover threads took is theirs to decide (least recently used first, but
  // picked concurrently): any block that left must come back from the remote tier, byte for byte.
  uint64_t gone = 0;
  for (uint64_t n = 1; n <= 8 && gone == 0; ++n) gone = Cached(n) ? 0 : n;
  ASSERT_NE(gone, 0u) << "nothing was published and dropped";
  Result<Lease> lease = AcquireWhenReady(gone);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->tier, TierId::kHost);
  EXPECT_EQ(std::vector<std::byte>(lease->address, lease->address + kBlock), Payload(gone));
  ASSERT_TRUE(store_->Release(lease->id).ok());
  EXPECT_EQ(store_->Stats().remote_fetches, 1u);
}

// NVMe above a remote tier: a block that leaves NVMe is published first, whether the watermarks
// take it ahead of demand or a demotion into a full NVMe tier needs its room. Every block put
// comes back, byte for byte, from wherever it went.
TEST_F(TierMoverTest, WithNvmeAboveARemoteTierEveryBlockThatLeavesNvmeIsPublished) {
  StoreOptions options;
  options.background_disk_moves = true;
  options.remote.store = &remote_;
  Build({4, 8}, /*last_addressable=*/false, options);
  StartMoverWithWatermarks(0.75, 0.5, /*threads=*/1);
  constexpr uint64_t kBlocks = 24;  // twice what host and NVMe hold together
  for (uint64_t n = 1; n <= kBlocks; ++n) {
    ASSERT_TRUE(UntilNotPending([&] { return PutBlock(n); }).ok()) << n;
  }
  const uint64_t left_nvme = store_->Stats().tiers[1].evictions;
  EXPECT_GT(left_nvme, 0u);
  EXPECT_GE(store_->Stats().remote_publishes, left_nvme);
  for (uint64_t n = 1; n <= kBlocks; ++n) {
    Result<Lease> lease = AcquireWhenReady(n);
    ASSERT_TRUE(lease.ok()) << "block " << n << ": " << lease.status().ToString();
    ASSERT_EQ(lease->tier, TierId::kHost);
    EXPECT_EQ(std::vector<std::byte>(lease->address, lease->address + kBlock), Payload(n)) << n;
    ASSERT_TRUE(store_->Release(lease->id).ok());
  }
}

}  // namespace
}  // namespace kvtier::mover
