#include "daemon/store/move_stats.h"

#include <gtest/gtest.h>

#include "daemon/store/store_test_fixture.h"

namespace kvtier::store {
namespace {

using std::chrono::microseconds;

const MoveSeries& Find(const std::vector<MoveSeries>& all, TierId from, TierId to) {
  for (const MoveSeries& s : all) {
    if (s.from == from && s.to == to) return s;
  }
  static const MoveSeries kNone{};
  ADD_FAILURE() << TierName(from) << " -> " << TierName(to) << " not in the snapshot";
  return kNone;
}

TEST(MoveStatsTest, CountsBytesAndTimesPerOrderedPair) {
  MoveStats stats(/*histograms=*/true);
  stats.RecordMove(TierId::kHost, TierId::kNvme, 4096, microseconds(100));
  stats.RecordMove(TierId::kHost, TierId::kNvme, 8192, microseconds(300));
  stats.RecordMove(TierId::kNvme, TierId::kHost, 4096, microseconds(50));
  const TierId chain[] = {TierId::kHost, TierId::kNvme};
  const std::vector<MoveSeries> all = stats.Snapshot(chain);
  ASSERT_EQ(all.size(), 2u);
  const MoveSeries& down = Find(all, TierId::kHost, TierId::kNvme);
  EXPECT_STREQ(down.kind(), "demotion");
  EXPECT_EQ(down.blocks, 2u);
  EXPECT_EQ(down.bytes, 12288u);
  EXPECT_EQ(down.latency.count(), 2u);
  EXPECT_EQ(down.latency.sum_ns, 400'000u);
  const MoveSeries& up = Find(all, TierId::kNvme, TierId::kHost);
  EXPECT_STREQ(up.kind(), "promotion");
  EXPECT_EQ(up.bytes, 4096u);
  EXPECT_EQ(up.latency.count(), 1u);
}

// Pairs that saw no move are there, at zero, so that rate() sees their first move.
TEST(MoveStatsTest, EveryPairOfTheChainIsInTheSnapshot) {
  MoveStats stats(true);
  const TierId chain[] = {TierId::kGpu, TierId::kHost, TierId::kNvme};
  const std::vector<MoveSeries> all = stats.Snapshot(chain);
  EXPECT_EQ(all.size(), 6u);
  EXPECT_EQ(Find(all, TierId::kGpu, TierId::kNvme).bytes, 0u);  // shutdown flush of the GPU tier
  EXPECT_EQ(Find(all, TierId::kHost, TierId::kGpu).blocks, 0u);
}

TEST(MoveStatsTest, WithoutHistogramsOnlyBytesAreCounted) {
  MoveStats stats(false);
  EXPECT_EQ(stats.Start(), MoveStats::Clock::time_point{});  // no clock read
  stats.RecordMove(TierId::kHost, TierId::kNvme, 4096, stats.Start());
  const TierId chain[] = {TierId::kHost, TierId::kNvme};
  const MoveSeries down = stats.Snapshot(chain)[0];
  EXPECT_EQ(down.bytes, 4096u);
  EXPECT_EQ(down.blocks, 1u);
  EXPECT_FALSE(down.timed);
  EXPECT_EQ(down.latency.count(), 0u);
}

using StoreMoveStatsTest = testing::StoreTest;

// The store records the moves it makes: a put into a full host tier demotes its victim to the
// tier below, and a read of that block promotes it back (demoting another to make room).
TEST_F(StoreMoveStatsTest, DemotionsAndPromotionsAreRecorded) {
  Build({2, 8});
  for (uint64_t n = 0; n < 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(testing::kNs, testing::Key(0), out).ok());
  const StoreStats s = store_->Stats();
  const MoveSeries& down = Find(s.moves, TierId::kHost, TierId::kNvme);
  const MoveSeries& up = Find(s.moves, TierId::kNvme, TierId::kHost);
  EXPECT_EQ(down.blocks, 2u);
  EXPECT_EQ(down.bytes, 2 * testing::kBlock);
  EXPECT_EQ(down.latency.count(), 2u);
  EXPECT_EQ(up.blocks, 1u);
  EXPECT_EQ(up.bytes, testing::kBlock);
  EXPECT_EQ(up.latency.count(), 1u);
  EXPECT_EQ(s.tiers[0].demotions, down.blocks);
  EXPECT_EQ(s.tiers[1].promotions, up.blocks);
}

// The mover's demotions go to the tier below as one batch: each block of it is a move.
TEST_F(StoreMoveStatsTest, EveryBlockOfABatchIsRecorded) {
  Build({4, 8});
  for (uint64_t n = 0; n < 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 0, 4), 4u);
  const StoreStats s = store_->Stats();
  const MoveSeries& down = Find(s.moves, TierId::kHost, TierId::kNvme);
  EXPECT_EQ(down.blocks, 4u);
  EXPECT_EQ(down.bytes, 4 * testing::kBlock);
  EXPECT_EQ(down.latency.count(), 4u);
}

TEST_F(StoreMoveStatsTest, HistogramsOffStillCountsMovedBytes) {
  Build({1, 8}, true, {.latency_histograms = false});
  for (uint64_t n = 0; n < 2; ++n) ASSERT_TRUE(PutBlock(n).ok());
  const StoreStats s = store_->Stats();
  const MoveSeries& down = Find(s.moves, TierId::kHost, TierId::kNvme);
  EXPECT_EQ(down.bytes, testing::kBlock);
  EXPECT_EQ(down.latency.count(), 0u);
}

}  // namespace
}  // namespace kvtier::store
