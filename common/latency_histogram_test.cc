#include "common/latency_histogram.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kvtier {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

TEST(LatencyHistogramTest, ABucketHoldsDurationsUpToItsBound) {
  EXPECT_EQ(LatencyBucketIndex(0), 0u);
  EXPECT_EQ(LatencyBucketIndex(1000), 0u);  // exactly 1 us: le="0.000001"
  EXPECT_EQ(LatencyBucketIndex(1001), 1u);  // just over: the 2 us bucket
  EXPECT_EQ(LatencyBucketIndex(2000), 1u);
  EXPECT_EQ(LatencyBucketIndex(2001), 2u);
  EXPECT_EQ(LatencyBucketIndex(4000), 2u);
  EXPECT_EQ(LatencyBucketIndex(4001), 3u);
  for (size_t i = 1; i < kLatencyFiniteBuckets; ++i) {
    const uint64_t bound_ns = LatencyBucketBoundMicros(i) * 1000;
    EXPECT_EQ(LatencyBucketIndex(bound_ns), i) << i;
    EXPECT_EQ(LatencyBucketIndex(bound_ns + 1), i + 1) << i;
  }
  EXPECT_EQ(LatencyBucketIndex(uint64_t{1} << 24 << 10), kLatencyFiniteBuckets);  // 17.2 s: +Inf
  EXPECT_EQ(LatencyBucketIndex(UINT64_MAX), kLatencyFiniteBuckets);
}

TEST(LatencyHistogramTest, BucketLabelsAreExactSeconds) {
  EXPECT_EQ(LatencyBucketLabel(0), "0.000001");
  EXPECT_EQ(LatencyBucketLabel(4), "0.000016");
  EXPECT_EQ(LatencyBucketLabel(10), "0.001024");
  EXPECT_EQ(LatencyBucketLabel(20), "1.048576");
  EXPECT_EQ(LatencyBucketLabel(24), "16.777216");
  EXPECT_EQ(LatencyBucketLabel(kLatencyFiniteBuckets), "+Inf");
}

TEST(LatencyHistogramTest, SnapshotCountsSumsAndCumulatesPerSeries) {
  LatencyHistograms h(3);
  h.Record(1, microseconds(1));           // bucket 0
  h.Record(1, microseconds(3));           // bucket 2 (<= 4 us)
  h.Record(1, microseconds(3));           // bucket 2
  h.Record(1, std::chrono::seconds(20));  // +Inf
  h.Record(2, nanoseconds(-5));           // counts as 0: bucket 0
  const LatencySnapshot s = h.Snapshot(1);
  EXPECT_EQ(s.count(), 4u);
  EXPECT_EQ(s.sum_ns, 1000u + 3000 + 3000 + 20'000'000'000);
  EXPECT_DOUBLE_EQ(s.sum_seconds(), 20.000007);
  EXPECT_EQ(s.CumulativeCount(0), 1u);
  EXPECT_EQ(s.CumulativeCount(1), 1u);
  EXPECT_EQ(s.CumulativeCount(2), 3u);
  EXPECT_EQ(s.CumulativeCount(kLatencyFiniteBuckets - 1), 3u);  // le="16.777216"
  EXPECT_EQ(s.CumulativeCount(kLatencyFiniteBuckets), 4u);      // le="+Inf" is the count
  EXPECT_EQ(h.Snapshot(0).count(), 0u);
  EXPECT_EQ(h.Snapshot(2).count(), 1u);
  EXPECT_EQ(h.Snapshot(2).sum_ns, 0u);
}

TEST(LatencyHistogramTest, QuantilesInterpolateWithinTheirBucket) {
  LatencySnapshot s;
  EXPECT_EQ(s.QuantileMicros(0.5), 0.0);  // empty
  s.buckets[3] = 100;                     // (4 us, 8 us]
  EXPECT_DOUBLE_EQ(s.QuantileMicros(0.5), 6.0);
  EXPECT_DOUBLE_EQ(s.QuantileMicros(1.0), 8.0);
  s.buckets[0] = 100;  // [0, 1 us]: the lower half now
  EXPECT_DOUBLE_EQ(s.QuantileMicros(0.25), 0.5);
  EXPECT_DOUBLE_EQ(s.QuantileMicros(0.75), 6.0);
  s.buckets[kLatencyFiniteBuckets] = 800;  // most beyond the last bound
  EXPECT_DOUBLE_EQ(s.QuantileMicros(0.99), double(LatencyBucketBoundMicros(24)));
}

TEST(LatencyHistogramTest, SnapshotsAdd) {
  LatencySnapshot a;
  a.buckets[1] = 2;
  a.sum_ns = 10;
  LatencySnapshot b;
  b.buckets[1] = 3;
  b.buckets[5] = 1;
  b.sum_ns = 5;
  a += b;
  EXPECT_EQ(a.buckets[1], 5u);
  EXPECT_EQ(a.buckets[5], 1u);
  EXPECT_EQ(a.sum_ns, 15u);
}

// Observations of many threads, spread over the shards, are all found by the snapshot.
TEST(LatencyHistogramTest, ConcurrentRecordsAreAllCounted) {
  LatencyHistograms h(2);
  constexpr int kThreads = 24;  // more than kShards: some threads share a shard
  constexpr int kEach = 10'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < kEach; ++i) h.Record(t % 2, microseconds(t + 1));
    });
  }
  for (std::thread& t : threads) t.join();
  const LatencySnapshot even = h.Snapshot(0);
  const LatencySnapshot odd = h.Snapshot(1);
  EXPECT_EQ(even.count() + odd.count(), uint64_t{kThreads} * kEach);
  uint64_t sum_us = 0;
  for (int t = 0; t < kThreads; ++t) sum_us += uint64_t(t + 1) * kEach;
  EXPECT_EQ(even.sum_ns + odd.sum_ns, sum_us * 1000);
}

}  // namespace
}  // namespace kvtier
