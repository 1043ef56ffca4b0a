#include "daemon/metrics/request_latency.h"

#include <gtest/gtest.h>

namespace kvtier::metrics {
namespace {

using std::chrono::microseconds;

TEST(RequestLatencyTest, TheColdestTierFoundStays) {
  RequestLabels labels{RequestOp::kGet, RequestPath::kInline};
  EXPECT_EQ(RequestTierName(labels.tier), "none");
  labels.Found(TierId::kHost);
  labels.Found(TierId::kGpu);
  EXPECT_EQ(labels.tier, TierId::kHost);
  labels.Found(TierId::kNvme);
  labels.Found(TierId::kHost);
  EXPECT_EQ(labels.tier, TierId::kNvme);
  EXPECT_EQ(RequestTierName(labels.tier), "nvme");
}

TEST(RequestLatencyTest, SnapshotHasTheObservedSeriesWithTheirLabels) {
  RequestLatency latency(true);
  ASSERT_TRUE(latency.enabled());
  latency.Record({RequestOp::kPut, RequestPath::kShm, TierId::kHost}, microseconds(3));
  latency.Record({RequestOp::kGet, RequestPath::kGeneric, std::nullopt}, microseconds(1));
  latency.Record({RequestOp::kPut, RequestPath::kShm, TierId::kHost}, microseconds(5));
  latency.Record({RequestOp::kCommit, RequestPath::kShm, TierId::kNvme}, microseconds(9));
  const std::vector<RequestLatencySeries> series = latency.Snapshot();
  ASSERT_EQ(series.size(), 3u);  // in op order: get, put, commit
  EXPECT_EQ(series[0].labels.op, RequestOp::kGet);
  EXPECT_EQ(series[0].labels.path, RequestPath::kGeneric);
  EXPECT_FALSE(series[0].labels.tier.has_value());
  EXPECT_EQ(series[0].latency.count(), 1u);
  EXPECT_EQ(series[1].labels.op, RequestOp::kPut);
  EXPECT_EQ(series[1].labels.path, RequestPath::kShm);
  EXPECT_EQ(series[1].labels.tier, TierId::kHost);
  EXPECT_EQ(series[1].latency.count(), 2u);
  EXPECT_EQ(series[1].latency.sum_ns, 8000u);
  EXPECT_EQ(series[2].labels.op, RequestOp::kCommit);
  EXPECT_EQ(series[2].labels.tier, TierId::kNvme);
}

TEST(RequestLatencyTest, DisabledRecordsNothing) {
  RequestLatency latency(false);
  EXPECT_FALSE(latency.enabled());
  latency.Record({RequestOp::kGet, RequestPath::kShm, TierId::kHost}, microseconds(3));
  EXPECT_TRUE(latency.Snapshot().empty());
}

}  // namespace
}  // namespace kvtier::metrics
