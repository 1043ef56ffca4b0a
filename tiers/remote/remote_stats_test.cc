#include "tiers/remote/remote_stats.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace kvtier::tiers::remote {
namespace {

TEST(RemoteStats, SnapshotAndVisitorAgreeFieldByField) {
  RemoteCounters counters;
  Add(counters.requests, 5);
  Add(counters.moved_redirects, 2);
  Add(counters.open_breakers);
  std::map<std::string, double> seen;
  VisitRemoteStats(counters.Snapshot(), [&](std::string_view name, double value) {
    EXPECT_TRUE(seen.emplace(std::string(name), value).second) << "twice: " << name;
  });
  // Every field is visited: RemoteStats holds nothing but its counters.
  EXPECT_EQ(seen.size(), sizeof(RemoteStats) / sizeof(uint64_t));
  EXPECT_EQ(seen["requests"], 5);
  EXPECT_EQ(seen["moved_redirects"], 2);
  EXPECT_EQ(seen["open_breakers"], 1);
  EXPECT_EQ(seen["bytes_in"], 0);
}

}  // namespace
}  // namespace kvtier::tiers::remote
