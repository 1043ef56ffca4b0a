#include "daemon/server/gpu_importers.h"

#include <gtest/gtest.h>

#include <thread>

namespace kvtier::server {
namespace {

using std::chrono::milliseconds;

TEST(GpuImportersTest, HoldsCountUntilDroppedMovedOrDestroyed) {
  GpuImporters importers;
  EXPECT_EQ(importers.WaitForNone(milliseconds(0)), 0u);
  GpuImporters::Hold a = importers.Add();
  {
    GpuImporters::Hold b = importers.Add();
    EXPECT_EQ(importers.count(), 2u);
    GpuImporters::Hold moved = std::move(b);
    EXPECT_FALSE(b.held());
    EXPECT_EQ(importers.count(), 2u);
  }
  EXPECT_EQ(importers.count(), 1u);
  GpuImporters::Hold c;
  c = std::move(a);
  EXPECT_EQ(importers.count(), 1u);
  c.Reset();
  c.Reset();
  EXPECT_EQ(importers.count(), 0u);
}

// The wait is bounded: an importer that never lets go leaves it after the timeout, with the count.
TEST(GpuImportersTest, TheWaitEndsAfterTheTimeoutWithTheHoldsLeft) {
  GpuImporters importers;
  GpuImporters::Hold stuck = importers.Add();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(importers.WaitForNone(milliseconds(30)), 1u);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(30));
}

// The last hold dropped on another thread ends the wait at once (the timeout is far away).
TEST(GpuImportersTest, TheLastDropEndsTheWait) {
  GpuImporters importers;
  GpuImporters::Hold first = importers.Add();
  GpuImporters::Hold second = importers.Add();
  std::thread dropper([&] {
    first.Reset();
    second.Reset();
  });
  EXPECT_EQ(importers.WaitForNone(std::chrono::hours(1)), 0u);
  dropper.join();
}

}  // namespace
}  // namespace kvtier::server
