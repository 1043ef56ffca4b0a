#include "daemon/cli/latency.h"

#include <gtest/gtest.h>

namespace kvtier::cli {
namespace {

using std::chrono::microseconds;

TEST(LatencyRecorderTest, NearestRankPercentiles) {
  LatencyRecorder a, b;
  for (int i = 100; i >= 51; --i) a.Add(microseconds(i));
  for (int i = 1; i <= 50; ++i) b.Add(microseconds(i));
  a.Merge(b);
  const LatencyRecorder::Summary s = a.Summarize();
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.p50_us, 50.0);
  EXPECT_DOUBLE_EQ(s.p99_us, 99.0);
  EXPECT_DOUBLE_EQ(s.max_us, 100.0);
  EXPECT_DOUBLE_EQ(s.mean_us, 50.5);
}

TEST(LatencyRecorderTest, EmptyAndSingle) {
  LatencyRecorder l;
  EXPECT_EQ(l.Summarize().count, 0u);
  EXPECT_DOUBLE_EQ(l.Summarize().p99_us, 0.0);
  l.Add(microseconds(7));
  EXPECT_DOUBLE_EQ(l.Summarize().p50_us, 7.0);
  EXPECT_DOUBLE_EQ(l.Summarize().p99_us, 7.0);
}

}  // namespace
}  // namespace kvtier::cli
