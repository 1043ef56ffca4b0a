#include "tiers/nvme/sync_schedule.h"

#include <gtest/gtest.h>

namespace kvtier::tiers::nvme {
namespace {

using Pending = NvmeTier::UnsyncedWrites;

TEST(SyncScheduleTest, WriteThroughCopiesAreSyncedEveryInterval) {
  SyncSchedule schedule({.acknowledged_ms = 1000, .cache_ms = 60'000}, /*now_ms=*/0);
  EXPECT_EQ(schedule.tick_ms(), 1000u);
  EXPECT_FALSE(schedule.Due({.blocks = 3, .acknowledged = 1}, 500)) << "not before the interval";
  EXPECT_TRUE(schedule.Due({.blocks = 3, .acknowledged = 1}, 1000));
  EXPECT_FALSE(schedule.Due({.blocks = 1, .acknowledged = 1}, 1500)) << "a new interval began";
  EXPECT_TRUE(schedule.Due({.blocks = 1, .acknowledged = 1}, 1995)) << "a tick a little early";
}

TEST(SyncScheduleTest, TheColdCacheWaitsForItsOwnLongerInterval) {
  SyncSchedule schedule({.acknowledged_ms = 1000, .cache_ms = 60'000}, /*now_ms=*/0);
  for (uint64_t now = 1000; now < 60'000; now += 1000) {
    EXPECT_FALSE(schedule.Due({.blocks = 100, .acknowledged = 0}, now)) << now;
  }
  EXPECT_TRUE(schedule.Due({.blocks = 100, .acknowledged = 0}, 60'000));
  EXPECT_FALSE(schedule.Due({.blocks = 100, .acknowledged = 0}, 61'000));
  // A write-through copy's sync takes the cold cache along and restarts its interval too.
  EXPECT_TRUE(schedule.Due({.blocks = 100, .acknowledged = 1}, 62'000));
  EXPECT_FALSE(schedule.Due({.blocks = 100, .acknowledged = 0}, 100'000));
  EXPECT_TRUE(schedule.Due({.blocks = 100, .acknowledged = 0}, 122'000));
}

TEST(SyncScheduleTest, NothingWrittenNothingSynced) {
  SyncSchedule schedule({.acknowledged_ms = 1000, .cache_ms = 5000}, /*now_ms=*/0);
  for (uint64_t now = 1000; now <= 100'000; now += 1000) EXPECT_FALSE(schedule.Due({}, now));
}

TEST(SyncScheduleTest, ZeroCacheIntervalSyncsTheCacheOnlyWithWriteThroughCopies) {
  SyncSchedule schedule({.acknowledged_ms = 1000, .cache_ms = 0}, /*now_ms=*/0);
  EXPECT_EQ(schedule.tick_ms(), 1000u);
  EXPECT_FALSE(schedule.Due({.blocks = 100, .acknowledged = 0}, 3'600'000));
  EXPECT_TRUE(schedule.Due({.blocks = 100, .acknowledged = 2}, 3'601'000));
}

TEST(SyncScheduleTest, TicksAtTheShorterInterval) {
  SyncSchedule schedule({.acknowledged_ms = 2000, .cache_ms = 500}, /*now_ms=*/0);
  EXPECT_EQ(schedule.tick_ms(), 500u);
  EXPECT_TRUE(schedule.Due({.blocks = 1, .acknowledged = 0}, 500));
}

}  // namespace
}  // namespace kvtier::tiers::nvme
