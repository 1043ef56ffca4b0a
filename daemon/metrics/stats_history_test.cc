#include "daemon/metrics/stats_history.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "hashing/namespace_descriptor.h"

namespace kvtier::metrics {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr size_t kHost = static_cast<size_t>(TierId::kHost);
constexpr size_t kNvme = static_cast<size_t>(TierId::kNvme);

store::NamespaceStats Namespace(uint64_t id, uint64_t lookup_blocks, uint64_t host_hits,
                                uint64_t nvme_hits = 0) {
  store::NamespaceStats ns;
  ns.id = NamespaceId{{0, id}};
  ns.label = "model-" + std::to_string(id);
  ns.lookup_blocks = lookup_blocks;
  ns.hit_blocks[kHost] = host_hits;
  ns.hit_blocks[kNvme] = nvme_hits;
  return ns;
}

// The name the history gives Namespace(id).
std::string Ref(uint64_t id) { return hashing::NamespaceRef(NamespaceId{{0, id}}); }

// A host tier and an NVMe tier with these cumulative counters.
store::StoreStats Stats(uint64_t host_used, uint64_t host_evictions, uint64_t host_demotions,
                        std::vector<store::NamespaceStats> namespaces) {
  store::StoreStats s;
  store::TierStatsSnapshot host;
  host.tier = TierId::kHost;
  host.space.capacity_bytes = 1000;
  host.space.used_bytes = host_used;
  host.evictions = host_evictions;
  host.demotions = host_demotions;
  store::TierStatsSnapshot nvme;
  nvme.tier = TierId::kNvme;
  nvme.space.capacity_bytes = 10000;
  s.tiers = {host, nvme};
  s.namespaces = std::move(namespaces);
  return s;
}

// `n` observations of `us` microseconds each, as a histogram snapshot.
LatencySnapshot Observed(uint64_t n, uint64_t us) {
  LatencySnapshot h;
  h.buckets[LatencyBucketIndex(us * 1000)] = n;
  h.sum_ns = n * us * 1000;
  return h;
}

ProcessInfo Process(uint64_t commands, std::vector<RequestLatencySeries> requests = {}) {
  ProcessInfo p;
  p.commands_processed = commands;
  p.requests = std::move(requests);
  return p;
}

json Samples(const StatsHistory& h) { return json::parse(h.ToJson())["samples"]; }

TEST(StatsHistoryTest, ASampleHoldsTheIntervalNotTheTotals) {
  StatsHistory h(milliseconds(10'000), 16, false);
  h.Record(1'000'000, Stats(100, 2, 1, {Namespace(1, 10, 6, 2)}), Process(50));
  h.Record(1'010'000, Stats(300, 5, 4, {Namespace(1, 30, 16, 2)}), Process(80));
  const json doc = json::parse(h.ToJson());
  EXPECT_EQ(doc["enabled"], true);
  EXPECT_EQ(doc["interval_ms"], 10'000);
  EXPECT_EQ(doc["capacity"], 16);
  EXPECT_EQ(doc["namespace_labels"][Ref(1)], "model-1");
  const json& s = doc["samples"];
  ASSERT_EQ(s.size(), 2u);
  // The first interval counts from the start, with its nominal length.
  EXPECT_EQ(s[0]["interval_ms"], 10'000);
  EXPECT_EQ(s[0]["lookup_blocks"], 10);
  EXPECT_DOUBLE_EQ(s[0]["hit_ratio"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(s[0]["tiers"]["nvme"]["hit_ratio"].get<double>(), 0.2);
  // The second: 20 blocks asked, 10 found, all in host.
  EXPECT_EQ(s[1]["unix_ms"], 1'010'000);
  EXPECT_EQ(s[1]["commands"], 30);
  EXPECT_DOUBLE_EQ(s[1]["commands_per_s"].get<double>(), 3.0);
  EXPECT_EQ(s[1]["lookup_blocks"], 20);
  EXPECT_EQ(s[1]["hit_blocks"], 10);
  EXPECT_DOUBLE_EQ(s[1]["hit_ratio"].get<double>(), 0.5);
  const json& host = s[1]["tiers"]["host"];
  EXPECT_EQ(host["used_bytes"], 300);  // a gauge: as it is at the end
  EXPECT_DOUBLE_EQ(host["used_ratio"].get<double>(), 0.3);
  EXPECT_EQ(host["hit_blocks"], 10);
  EXPECT_DOUBLE_EQ(host["hit_ratio"].get<double>(), 0.5);
  EXPECT_EQ(host["evictions"], 3);
  EXPECT_EQ(host["demotions"], 3);
  EXPECT_EQ(s[1]["tiers"]["nvme"]["hit_blocks"], 0);
  EXPECT_FALSE(s[1]["tiers"].contains("gpu"));  // no such tier
  const json& ns = s[1]["namespaces"][Ref(1)];
  EXPECT_EQ(ns["lookup_blocks"], 20);
  EXPECT_DOUBLE_EQ(ns["hit_ratio"].get<double>(), 0.5);
  EXPECT_TRUE(s[1]["requests"].empty());  // histograms off
}

// Regression: a label that is not UTF-8 made ToJson throw, and /stats/history (the dashboard's
// charts) answered nothing.
TEST(StatsHistoryTest, ALabelThatIsNotUtf8IsRenderedWithAReplacementCharacter) {
  StatsHistory h(milliseconds(10'000), 16, false);
  store::NamespaceStats ns = Namespace(1, 10, 6);
  ns.label = "model\xFF";
  h.Record(1'000'000, Stats(100, 0, 0, {ns}), Process(1));
  std::string text;
  ASSERT_NO_THROW(text = h.ToJson());
  EXPECT_EQ(json::parse(text)["namespace_labels"][Ref(1)], "model\xEF\xBF\xBD");
}

TEST(StatsHistoryTest, RatiosOfAnIdleIntervalAreNull) {
  StatsHistory h(milliseconds(1000), 4, true);
  h.Record(5000, Stats(0, 0, 0, {Namespace(1, 0, 0)}), Process(0));
  const json s = Samples(h)[0];
  EXPECT_TRUE(s["hit_ratio"].is_null());
  EXPECT_TRUE(s["tiers"]["host"]["hit_ratio"].is_null());
  EXPECT_TRUE(s["namespaces"].empty());  // nothing asked: not worth a line
  EXPECT_EQ(s["requests"]["get"]["count"], 0);
  EXPECT_TRUE(s["requests"]["get"]["p99_us"].is_null());
}

TEST(StatsHistoryTest, TheRingKeepsTheNewestSamplesOldestFirst) {
  StatsHistory h(milliseconds(1000), 3, false);
  for (int i = 1; i <= 7; ++i) h.Record(i * 1000, Stats(i, 0, 0, {}), Process(i * 10));
  EXPECT_EQ(h.size(), 3u);
  const json s = Samples(h);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0]["unix_ms"], 5000);
  EXPECT_EQ(s[1]["unix_ms"], 6000);
  EXPECT_EQ(s[2]["unix_ms"], 7000);
  EXPECT_EQ(s[2]["commands"], 10);
}

TEST(StatsHistoryTest, KeepsTheBusiestNamespacesAndCountsThemAll) {
  StatsHistory h(milliseconds(1000), 4, false);
  std::vector<store::NamespaceStats> namespaces;
  for (uint64_t id = 1; id <= kHistoryNamespaces + 4; ++id) {
    namespaces.push_back(Namespace(id, id * 10, id));
  }
  h.Record(1000, Stats(0, 0, 0, namespaces), Process(0));
  const json s = Samples(h)[0];
  ASSERT_EQ(s["namespaces"].size(), kHistoryNamespaces);
  EXPECT_FALSE(s["namespaces"].contains(Ref(1)));  // the quietest
  EXPECT_TRUE(s["namespaces"].contains(Ref(12)));
  uint64_t asked = 0;
  for (const auto& ns : namespaces) asked += ns.lookup_blocks;
  EXPECT_EQ(s["lookup_blocks"], asked);
}

TEST(StatsHistoryTest, PercentilesAreThoseOfTheInterval) {
  StatsHistory h(milliseconds(1000), 4, true);
  const RequestLabels get{RequestOp::kGet, RequestPath::kShm, TierId::kHost};
  const RequestLabels get_inline{RequestOp::kGet, RequestPath::kInline, std::nullopt};
  // First interval: 100 fast gets. Second: 100 slow ones more, over two series.
  h.Record(1000, Stats(0, 0, 0, {}), Process(100, {{get, Observed(100, 10)}}));
  LatencySnapshot both = Observed(100, 10);
  both += Observed(50, 4000);
  h.Record(2000, Stats(0, 0, 0, {}), Process(200, {{get, both}, {get_inline, Observed(50, 4000)}}));
  const json s = Samples(h);
  EXPECT_EQ(s[0]["requests"]["get"]["count"], 100);
  EXPECT_LE(s[0]["requests"]["get"]["p99_us"].get<double>(), 16.0);
  EXPECT_EQ(s[1]["requests"]["get"]["count"], 100);
  EXPECT_DOUBLE_EQ(s[1]["requests"]["get"]["per_s"].get<double>(), 100.0);
  // Only slow gets in the second interval: its median is not pulled down by the first's.
  EXPECT_GT(s[1]["requests"]["get"]["p50_us"].get<double>(), 2048.0);
  EXPECT_EQ(s[1]["requests"]["put"]["count"], 0);
}

TEST(StatsHistoryTest, ACounterThatWentDownCountsFromZero) {
  StatsHistory h(milliseconds(1000), 4, false);
  h.Record(1000, Stats(0, 9, 0, {Namespace(1, 100, 50)}), Process(500));
  // The namespace was dropped and registered again; the daemon's counters cannot go down, but a
  // namespace's can.
  h.Record(2000, Stats(0, 9, 0, {Namespace(1, 4, 1)}), Process(510));
  const json s = Samples(h)[1];
  EXPECT_EQ(s["lookup_blocks"], 4);
  EXPECT_EQ(s["hit_blocks"], 1);
  EXPECT_EQ(s["tiers"]["host"]["evictions"], 0);
}

TEST(StatsHistoryTest, TheDefaultRingTakesAboutOneMebibyte) {
  // metrics.history's defaults (10 s for 6 hours), as deploy/kvtierd.yaml states them.
  EXPECT_LE(2160 * sizeof(HistorySample), 2160 * kMaxHistorySampleBytes);
  EXPECT_LE(2160 * kMaxHistorySampleBytes, 1.25 * (1 << 20));
}

TEST(StatsHistoryTest, DisabledJsonSaysSo) {
  const json doc = json::parse(StatsHistory::DisabledJson());
  EXPECT_EQ(doc["enabled"], false);
  EXPECT_TRUE(doc["samples"].empty());
}

}  // namespace
}  // namespace kvtier::metrics
