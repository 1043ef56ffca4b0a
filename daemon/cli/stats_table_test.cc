#include "daemon/cli/stats_table.h"

#include <gtest/gtest.h>

#include <string>

namespace kvtier::cli {
namespace {

// The shape daemon/metrics/stats_format.h documents.
constexpr char kStats[] = R"({
  "tiers": [{"tier": "host", "capacity_bytes": 67108864, "used_bytes": 16777216,
             "reserved_bytes": 16777216, "blocks": 16, "fragmentation": 0.0, "evictions": 3,
             "demotions": 0, "drops": 3}],
  "namespaces": [{"ref": "0011223344556677", "label": "", "lookups": 10,
                  "lookup_blocks": 200, "hit_blocks": {"gpu": 0, "host": 50, "nvme": 30},
                  "hit_tokens": 0, "miss_blocks": 120, "evictions": 7}],
  "totals": {"blocks_present": 16, "leases_active": 0},
  "process": {"version": "0.1.0"}
})";

TEST(StatsTableTest, RendersTiersNamespacesAndTotals) {
  Result<std::string> table = FormatStatsTable(kStats);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  const std::string& t = *table;
  EXPECT_NE(t.find("host"), std::string::npos) << t;
  EXPECT_NE(t.find("16.0 MiB"), std::string::npos) << t;
  EXPECT_NE(t.find("64.0 MiB"), std::string::npos) << t;
  EXPECT_NE(t.find("25.0%"), std::string::npos) << t;             // tier use
  EXPECT_NE(t.find("0011223344556677"), std::string::npos) << t;  // unlabelled namespace: ref
  EXPECT_NE(t.find("40.0%"), std::string::npos) << t;             // hit ratio: 80 of 200
  EXPECT_NE(t.find("15.0%"), std::string::npos) << t;             // nvme share
  EXPECT_NE(t.find("blocks_present=16"), std::string::npos) << t;
}

TEST(StatsTableTest, MissingFieldsShowAsDashes) {
  Result<std::string> table =
      FormatStatsTable(R"({"tiers": [{"tier": "nvme"}], "namespaces": []})");
  ASSERT_TRUE(table.ok());
  EXPECT_NE(table->find("nvme"), std::string::npos);
  EXPECT_NE(table->find(" - "), std::string::npos) << *table;
  EXPECT_NE(table->find("(no namespaces)"), std::string::npos);
}

TEST(StatsTableTest, ShowsDeviceCountersAndWhyATierIsAbsent) {
  Result<std::string> table = FormatStatsTable(R"({
    "tiers": [{"tier": "nvme", "capacity_bytes": 100, "used_bytes": 50, "demotions": 0,
               "promotions": 4, "device": {"reads": 12, "checksum_failures": 1}}],
    "namespaces": [],
    "process": {"gpu_tier": "no GPU tier: built without CUDA", "nvme_tier": ""}})");
  ASSERT_TRUE(table.ok());
  EXPECT_NE(table->find("nvme device: checksum_failures=1 reads=12"), std::string::npos) << *table;
  EXPECT_NE(table->find("no GPU tier: built without CUDA\n"), std::string::npos) << *table;
}

TEST(StatsTableTest, ShowsTheRemoteClientsCountersOnlyWithARemoteTier) {
  Result<std::string> table = FormatStatsTable(R"({
    "tiers": [], "namespaces": [],
    "remote_client": {"masters": 3, "errors_timeout": 2, "calls": 40}})");
  ASSERT_TRUE(table.ok());
  EXPECT_NE(table->find("remote client: calls=40 errors_timeout=2 masters=3\n"), std::string::npos)
      << *table;
  Result<std::string> without = FormatStatsTable(R"({"tiers": [], "remote_client": {}})");
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->find("remote client"), std::string::npos) << *without;
}

TEST(StatsTableTest, ShowsLatencyPercentilesOfRequestsAndMoves) {
  Result<std::string> table = FormatStatsTable(R"({
    "tiers": [], "namespaces": [],
    "requests": [{"op": "get", "path": "shm", "tier": "host", "count": 42, "sum_us": 100,
                  "p50_us": 3.5, "p99_us": 120.25}],
    "moves": [{"kind": "demotion", "from": "host", "to": "nvme", "blocks": 7, "bytes": 7340032,
               "p50_us": 96.0, "p99_us": 127.4},
              {"kind": "promotion", "from": "nvme", "to": "host", "blocks": 1, "bytes": 4096}]})");
  ASSERT_TRUE(table.ok());
  EXPECT_NE(table->find("get     shm      host          42        3.5      120.2\n"),
            std::string::npos)
      << *table;
  EXPECT_NE(table->find("demotion  host  nvme           7      7.0 MiB       96.0      127.4\n"),
            std::string::npos)
      << *table;
  // Moves not timed (metrics.histograms: false) have no percentiles.
  EXPECT_NE(table->find("promotion nvme  host           1      4.0 KiB          -          -\n"),
            std::string::npos)
      << *table;
}

// A field of an unexpected type (another server, another version) is shown as "?", as a missing
// one is: nlohmann's value() threw on it, out of the CLI.
TEST(StatsTableTest, NamesOfAnotherTypeShowAsQuestionMarks) {
  Result<std::string> table = FormatStatsTable(R"({
    "tiers": [{"tier": 1}], "process": {"gpu_tier": false},
    "namespaces": [{"ref": 7, "label": null}],
    "requests": [{"op": 5, "path": [], "tier": {}, "count": 1}],
    "moves": [{"kind": 1, "from": 2, "to": 3, "blocks": 1, "bytes": 1}]})");
  ASSERT_TRUE(table.ok());
  EXPECT_NE(table->find("?       ?        ?              1"), std::string::npos) << *table;
  EXPECT_NE(table->find("?         ?     ?              1"), std::string::npos) << *table;
}

TEST(StatsTableTest, NotJsonIsAnError) {
  EXPECT_EQ(FormatStatsTable("not json").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FormatStatsTable("[1, 2]").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::cli
