#include "daemon/metrics/stats_format.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvtier::metrics {
namespace {

store::StoreStats SampleStats() {
  store::StoreStats s;
  store::TierStatsSnapshot host;
  host.tier = TierId::kHost;
  host.space.capacity_bytes = 1 << 20;
  host.space.used_bytes = 4096;
  host.space.block_count = 1;
  host.evictions = 3;
  s.tiers.push_back(host);
  store::TierStatsSnapshot gpu;
  gpu.tier = TierId::kGpu;
  gpu.space.capacity_bytes = 1 << 19;
  gpu.demotions = 2;
  gpu.copy_errors = 1;
  s.tiers.insert(s.tiers.begin(), gpu);
  s.gpu_candidates = 5;
  store::NamespaceStats ns;
  ns.id = NamespaceId{{1, 2}};
  ns.label = "llama \"8b\"";
  ns.lookups = 2;
  ns.lookup_blocks = 8;
  ns.hit_blocks[static_cast<size_t>(TierId::kHost)] = 6;
  ns.hit_tokens = 96;
  ns.miss_blocks = 2;
  s.namespaces.push_back(ns);
  s.blocks_present = 1;
  s.committed_puts = 4;
  s.evicted_blocks = 3;
  s.pending_adoptions = 9;
  return s;
}

TEST(StatsFormatTest, JsonCarriesTiersNamespacesAndTotals) {
  auto doc = nlohmann::json::parse(StatsToJson(SampleStats(), {.version = "0.1.0"}));
  EXPECT_EQ(doc["tiers"][0]["tier"], "gpu");  // hottest first
  EXPECT_EQ(doc["tiers"][0]["copy_errors"], 1);
  EXPECT_EQ(doc["tiers"][1]["tier"], "host");
  EXPECT_EQ(doc["tiers"][1]["used_bytes"], 4096);
  EXPECT_EQ(doc["tiers"][1]["evictions"], 3);
  EXPECT_EQ(doc["totals"]["gpu_candidates"], 5);
  EXPECT_EQ(doc["namespaces"][0]["id"], "00000000000000010000000000000002");
  EXPECT_EQ(doc["namespaces"][0]["hit_blocks"]["host"], 6);
  EXPECT_DOUBLE_EQ(doc["namespaces"][0]["block_hit_ratio"].get<double>(), 0.75);
  EXPECT_EQ(doc["totals"]["committed_puts"], 4);
  EXPECT_EQ(doc["process"]["version"], "0.1.0");
}

TEST(StatsFormatTest, PrometheusHasTypedLabelledSamples) {
  std::string text = StatsToPrometheus(SampleStats(), {});
  EXPECT_NE(text.find("# TYPE kvtier_tier_used_bytes gauge\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_tier_used_bytes{tier=\"host\"} 4096\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_hit_blocks_total{namespace=\"llama \\\"8b\\\"\",ns_id=\""
                      "00000000000000010000000000000002\",tier=\"host\"} 6\n"),
            std::string::npos);
  EXPECT_NE(text.find("kvtier_evicted_blocks_total 3\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_tier_demotions_total{tier=\"gpu\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_tier_copy_errors_total{tier=\"gpu\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_gpu_candidates_total 5\n"), std::string::npos);
}

// Regression: rejected_connections reached INFO but neither /stats nor /metrics.
TEST(StatsFormatTest, EveryViewCarriesRejectedConnectionsAndPendingAdoptions) {
  const ProcessInfo process{.rejected_connections = 7};
  auto doc = nlohmann::json::parse(StatsToJson(SampleStats(), process));
  EXPECT_EQ(doc["process"]["rejected_connections"], 7);
  EXPECT_EQ(doc["totals"]["pending_adoptions"], 9);
  const std::string text = StatsToPrometheus(SampleStats(), process);
  EXPECT_NE(text.find("# TYPE kvtier_rejected_connections_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_rejected_connections_total 7\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE kvtier_pending_adoptions gauge\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_pending_adoptions 9\n"), std::string::npos);
  EXPECT_NE(StatsToInfoSection(SampleStats()).find("pending_adoptions:9\r\n"), std::string::npos);
}

TEST(StatsFormatTest, InfoSectionUsesRedisFieldSyntax) {
  std::string info = StatsToInfoSection(SampleStats());
  EXPECT_NE(info.find("tier_host_used_bytes:4096\r\n"), std::string::npos);
  EXPECT_NE(info.find("tier_gpu_copy_errors:1\r\n"), std::string::npos);
  EXPECT_NE(info.find("hit_ratio=0.7500"), std::string::npos);
}

// Every count the JSON views show reaches /metrics too: each field of the snapshot gets its own
// value here, and each value the JSON carries must be the value of some sample.
TEST(StatsFormatTest, EveryJsonCountIsAlsoAPrometheusSample) {
  store::StoreStats s = SampleStats();
  uint64_t next = 1001;
  for (uint64_t* f : {&s.blocks_present,         &s.blocks_writing,      &s.blocks_quarantined,
                      &s.blocks_shadowed,        &s.leases_active,       &s.committed_puts,
                      &s.aborted_puts,           &s.busy_puts,           &s.removed_blocks,
                      &s.evicted_blocks,         &s.adopted_blocks,      &s.write_throughs,
                      &s.write_through_failures, &s.gpu_candidates,      &s.gpu_candidates_dropped,
                      &s.gpu_promotions_skipped, &s.pending_promotions,  &s.pending_adoptions,
                      &s.expired_leases,         &s.expired_reservations}) {
    *f = next++;
  }
  store::NamespaceStats& ns = s.namespaces[0];
  for (uint64_t* f : {&ns.lookups, &ns.lookup_blocks, &ns.hit_tokens, &ns.miss_blocks, &ns.puts,
                      &ns.put_bytes, &ns.gets, &ns.get_misses, &ns.evictions}) {
    *f = next++;
  }
  store::TierStatsSnapshot& t = s.tiers[1];
  for (uint64_t* f :
       {&t.space.capacity_bytes, &t.space.used_bytes, &t.space.reserved_bytes, &t.space.block_count,
        &t.evictions, &t.demotions, &t.drops, &t.admission_drops, &t.lag_drops, &t.promotions,
        &t.corrupt_drops, &t.copy_errors}) {
    *f = next++;
  }
  const nlohmann::json doc = nlohmann::json::parse(StatsToJson(s, {}));
  const std::string prom = StatsToPrometheus(s, {});
  auto has_sample = [&prom](uint64_t v) {
    return prom.find(" " + std::to_string(v) + "\n") != std::string::npos;
  };
  for (const auto& [name, value] : doc["totals"].items()) {
    EXPECT_TRUE(has_sample(value.get<uint64_t>())) << "totals." << name;
  }
  for (const auto& [name, value] : doc["namespaces"][0].items()) {
    if (!value.is_number_unsigned() || name == "tokens_per_block") continue;
    EXPECT_TRUE(has_sample(value.get<uint64_t>())) << "namespaces." << name;
  }
  for (const auto& [name, value] : doc["tiers"][1].items()) {
    if (!value.is_number_unsigned()) continue;
    EXPECT_TRUE(has_sample(value.get<uint64_t>())) << "tiers." << name;
  }
}

}  // namespace
}  // namespace kvtier::metrics
