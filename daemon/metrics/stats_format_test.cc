#include "daemon/metrics/stats_format.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "hashing/namespace_descriptor.h"

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
  EXPECT_EQ(doc["namespaces"][0]["ref"], hashing::NamespaceRef(NamespaceId{{1, 2}}));
  EXPECT_FALSE(doc["namespaces"][0].contains("id")) << "ids only for admins";
  EXPECT_EQ(doc["namespaces"][0]["hit_blocks"]["host"], 6);
  EXPECT_DOUBLE_EQ(doc["namespaces"][0]["block_hit_ratio"].get<double>(), 0.75);
  EXPECT_EQ(doc["totals"]["committed_puts"], 4);
  EXPECT_EQ(doc["process"]["version"], "0.1.0");
}

// An id lets a client read, explain and drop a namespace's blocks: only an admin's view has it.
TEST(StatsFormatTest, NamespaceIdsAppearOnlyWhenShown) {
  const std::string id = NamespaceId{{1, 2}}.ToHex();
  auto shown = nlohmann::json::parse(StatsToJson(SampleStats(), {}, NamespaceIds::kShown));
  EXPECT_EQ(shown["namespaces"][0]["id"], id);
  EXPECT_EQ(shown["namespaces"][0]["ref"], hashing::NamespaceRef(NamespaceId{{1, 2}}));
  store::StoreStats unlabelled = SampleStats();
  unlabelled.namespaces[0].label.clear();
  for (const std::string& text : {StatsToJson(unlabelled, {}), StatsToPrometheus(unlabelled, {}),
                                  StatsToInfoSection(unlabelled, {})}) {
    EXPECT_EQ(text.find(id), std::string::npos) << text;
    EXPECT_NE(text.find(hashing::NamespaceRef(NamespaceId{{1, 2}})), std::string::npos) << text;
  }
}

TEST(StatsFormatTest, PrometheusHasTypedLabelledSamples) {
  std::string text = StatsToPrometheus(SampleStats(), {});
  EXPECT_NE(text.find("# TYPE kvtier_tier_used_bytes gauge\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_tier_used_bytes{tier=\"host\"} 4096\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_hit_blocks_total{namespace=\"llama \\\"8b\\\"\",ns_ref=\"" +
                      hashing::NamespaceRef(NamespaceId{{1, 2}}) + "\",tier=\"host\"} 6\n"),
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
  EXPECT_NE(StatsToInfoSection(SampleStats(), process).find("pending_adoptions:9\r\n"),
            std::string::npos);
}

// Regression: a namespace label that is not UTF-8 (registered before KVT.REGISTER checked, and
// read back from the NVMe catalog) made StatsToJson throw, which emptied /stats and closed the
// KVT.STATS connection; /metrics carried the raw bytes, which a scraper refuses.
TEST(StatsFormatTest, ALabelThatIsNotUtf8IsRenderedWithReplacementCharacters) {
  store::StoreStats stats = SampleStats();
  stats.namespaces[0].label = "llama\xFF\xC0 8b";
  std::string text;
  ASSERT_NO_THROW(text = StatsToJson(stats, {}));
  const auto doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc["namespaces"][0]["label"], "llama\xEF\xBF\xBD\xEF\xBF\xBD 8b");
  const std::string prometheus = StatsToPrometheus(stats, {});
  EXPECT_EQ(prometheus.find("\xFF"), std::string::npos);
  EXPECT_NE(prometheus.find("namespace=\"llama\xEF\xBF\xBD\xEF\xBF\xBD 8b\""), std::string::npos);
}

TEST(StatsFormatTest, InfoSectionUsesRedisFieldSyntax) {
  std::string info = StatsToInfoSection(SampleStats(), {});
  EXPECT_NE(info.find("tier_host_used_bytes:4096\r\n"), std::string::npos);
  EXPECT_NE(info.find("tier_gpu_copy_errors:1\r\n"), std::string::npos);
  EXPECT_NE(info.find("hit_ratio=0.7500"), std::string::npos);
}

// Regression: docs/protocol.md and docs/gpu.md point to INFO for why a tier is absent, and INFO
// did not say it. An empty note (the tier runs) adds no field.
TEST(StatsFormatTest, InfoSaysWhyATierIsAbsent) {
  const ProcessInfo process{.gpu_tier_note = "no GPU tier: disabled in config (gpu.bytes is 0)",
                            .nvme_tier_note = "no NVMe tier: \r\nbroken"};
  const std::string info = StatsToInfoSection(SampleStats(), process);
  EXPECT_NE(info.find("gpu_tier:no GPU tier: disabled in config (gpu.bytes is 0)\r\n"),
            std::string::npos)
      << info;
  EXPECT_NE(info.find("nvme_tier:no NVMe tier:   broken\r\n"), std::string::npos) << info;
  EXPECT_EQ(StatsToInfoSection(SampleStats(), {}).find("gpu_tier:"), std::string::npos);
}

// Every count the JSON views show reaches /metrics too: each field of the snapshot gets its own
// value here, and each value the JSON carries must be the value of some sample.
TEST(StatsFormatTest, EveryJsonCountIsAlsoAPrometheusSample) {
  store::StoreStats s = SampleStats();
  uint64_t next = 1001;
  for (uint64_t* f : {&s.blocks_present,
                      &s.blocks_writing,
                      &s.blocks_quarantined,
                      &s.blocks_shadowed,
                      &s.leases_active,
                      &s.committed_puts,
                      &s.aborted_puts,
                      &s.busy_puts,
                      &s.removed_blocks,
                      &s.evicted_blocks,
                      &s.adopted_blocks,
                      &s.write_throughs,
                      &s.write_through_failures,
                      &s.write_through_timeouts,
                      &s.gpu_candidates,
                      &s.gpu_candidates_dropped,
                      &s.gpu_promotions_skipped,
                      &s.pending_promotions,
                      &s.pending_adoptions,
                      &s.expired_leases,
                      &s.expired_reservations,
                      &s.not_admitted_blocks,
                      &s.shadow_bytes}) {
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
        &t.evictions, &t.demotions, &t.copy_demotions, &t.drops, &t.admission_drops, &t.lag_drops,
        &t.promotions, &t.corrupt_drops, &t.copy_errors}) {
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

// Two gets of the shared-memory path from the host tier (3 us and 300 us), and moves host -> NVMe
// (two blocks of 4 KiB, 100 us each) with none back.
struct LatencySample {
  store::StoreStats stats = SampleStats();
  ProcessInfo process;
  LatencySample() {
    LatencySnapshot get;
    get.buckets[LatencyBucketIndex(3'000)] = 1;
    get.buckets[LatencyBucketIndex(300'000)] = 1;
    get.sum_ns = 303'000;
    process.requests.push_back({{RequestOp::kGet, RequestPath::kShm, TierId::kHost}, get});
    LatencySnapshot moved;
    moved.buckets[LatencyBucketIndex(100'000)] = 2;
    moved.sum_ns = 200'000;
    stats.moves.push_back({TierId::kHost, TierId::kNvme, 2, 8192, true, moved});
    stats.moves.push_back({TierId::kNvme, TierId::kHost, 0, 0, true, {}});
  }
};

TEST(StatsFormatTest, PrometheusHistogramsHaveCumulativeBucketsSumAndCount) {
  const LatencySample sample;
  const std::string text = StatsToPrometheus(sample.stats, sample.process);
  const std::string series =
      "kvtier_request_duration_seconds_bucket{op=\"get\",path=\"shm\",tier=\"host\",";
  EXPECT_NE(text.find("# TYPE kvtier_request_duration_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find(series + "le=\"0.000002\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find(series + "le=\"0.000004\"} 1\n"), std::string::npos);  // 3 us
  EXPECT_NE(text.find(series + "le=\"0.000256\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find(series + "le=\"0.000512\"} 2\n"), std::string::npos);  // and 300 us
  EXPECT_NE(text.find(series + "le=\"16.777216\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find(series + "le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_request_duration_seconds_sum{op=\"get\",path=\"shm\",tier=\"host\"} "
                      "0.000303\n"),
            std::string::npos);
  EXPECT_NE(
      text.find("kvtier_request_duration_seconds_count{op=\"get\",path=\"shm\",tier=\"host\"} "
                "2\n"),
      std::string::npos);
  EXPECT_NE(text.find("# TYPE kvtier_tier_move_duration_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_tier_move_duration_seconds_count{kind=\"demotion\",from=\"host\","
                      "to=\"nvme\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("kvtier_tier_move_duration_seconds_count{kind=\"promotion\",from=\"nvme\","
                      "to=\"host\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE kvtier_tier_moved_bytes_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_tier_moved_bytes_total{from=\"host\",to=\"nvme\"} 8192\n"),
            std::string::npos);
}

// With metrics.histograms off the moves are counted, not timed: no histogram claims zero moves.
TEST(StatsFormatTest, UntimedMovesHaveBytesButNoHistogram) {
  LatencySample sample;
  for (store::MoveSeries& m : sample.stats.moves) m = {m.from, m.to, m.blocks, m.bytes};
  const std::string text = StatsToPrometheus(sample.stats, sample.process);
  EXPECT_EQ(text.find("kvtier_tier_move_duration_seconds_count"), std::string::npos);
  EXPECT_NE(text.find("kvtier_tier_moved_bytes_total{from=\"host\",to=\"nvme\"} 8192\n"),
            std::string::npos);
  const auto doc = nlohmann::json::parse(StatsToJson(sample.stats, sample.process));
  EXPECT_EQ(doc["moves"][0]["bytes"], 8192);
  EXPECT_FALSE(doc["moves"][0].contains("p99_us"));
}

// /stats, `kvtier stats --json` and INFO read the same histograms as /metrics.
TEST(StatsFormatTest, JsonAndInfoCarryTheHistogramsAsCountsAndPercentiles) {
  const LatencySample sample;
  const auto doc = nlohmann::json::parse(StatsToJson(sample.stats, sample.process));
  ASSERT_EQ(doc["requests"].size(), 1u);
  const auto& get = doc["requests"][0];
  EXPECT_EQ(get["op"], "get");
  EXPECT_EQ(get["path"], "shm");
  EXPECT_EQ(get["tier"], "host");
  EXPECT_EQ(get["count"], 2);
  EXPECT_EQ(get["sum_us"], 303);
  EXPECT_DOUBLE_EQ(get["p50_us"].get<double>(), 4.0);    // the top of the 3 us bucket
  EXPECT_DOUBLE_EQ(get["p99_us"].get<double>(), 506.9);  // 256 + 256 * 0.98, rounded
  ASSERT_EQ(doc["moves"].size(), 2u);
  EXPECT_EQ(doc["moves"][0]["kind"], "demotion");
  EXPECT_EQ(doc["moves"][0]["blocks"], 2);
  EXPECT_EQ(doc["moves"][0]["bytes"], 8192);
  EXPECT_DOUBLE_EQ(doc["moves"][0]["p50_us"].get<double>(), 96.0);  // 64 + 64 * 0.5
  const std::string info = StatsToInfoSection(sample.stats, sample.process);
  EXPECT_NE(info.find("request_get_shm_host:count=2,p50_us=4.0,p99_us=506.9\r\n"),
            std::string::npos)
      << info;
  EXPECT_NE(info.find("move_host_nvme:blocks=2,bytes=8192,p50_us=96.0,p99_us=127.4\r\n"),
            std::string::npos)
      << info;
}

}  // namespace
}  // namespace kvtier::metrics
