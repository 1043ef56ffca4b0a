// StatsHistory: the recent past of kvtierd's statistics, for /stats/history and the dashboard.
//
// kvtierd's sampler thread (metrics.history_interval_ms, 10 s by default) calls Record with the
// store's statistics and the server's counters; each call appends one HistorySample holding what
// happened in the interval since the previous call (blocks asked and found, by tier and by
// namespace; commands; lookups, gets, puts and commits with their p50 and p99 latency) and the
// state at its end (bytes used per tier). Counters are differenced here, so a chart plots a
// sample's numbers as they are, and a percentile is that of the interval's observations (the
// difference of two histogram snapshots), not of everything since the start.
//
// Memory: a fixed ring of `capacity` samples of at most kMaxHistorySampleBytes each (the busiest
// kHistoryNamespaces namespaces of each interval; the overall and per-tier numbers count all of
// them), about 1.2 MiB for the default 6 hours at 10 s; once full the oldest sample goes. Besides
// the ring, the counters of the previous Record: one entry per namespace the store has.
//
// Thread safety: Record from one thread at a time (the sampler); ToJson and size from any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/keys.h"
#include "common/latency_histogram.h"
#include "common/thread_annotations.h"
#include "common/types.h"
#include "daemon/metrics/stats_format.h"

namespace kvtier::metrics {

// Namespaces kept per sample: the ones with the most blocks asked in the interval. A dashboard
// line per namespace stops being readable well before this.
inline constexpr size_t kHistoryNamespaces = 8;

struct HistoryTierSample {
  uint64_t used_bytes = 0;  // at the end of the interval
  uint64_t capacity_bytes = 0;
  uint64_t hit_blocks = 0;  // in the interval: blocks lookups found in this tier
  uint64_t evictions = 0;   // in the interval, as in TierStatsSnapshot
  uint64_t demotions = 0;
  uint64_t promotions = 0;
};

struct HistoryNamespaceSample {
  NamespaceId id;
  uint64_t lookup_blocks = 0;  // in the interval
  uint64_t hit_blocks = 0;     // in the interval, all tiers
};

struct HistoryRequestSample {
  uint64_t count = 0;  // commands of this op in the interval
  float p50_us = 0;    // of those commands; 0 when count is 0
  float p99_us = 0;
};

struct HistorySample {
  int64_t unix_ms = 0;       // when the interval ended
  uint32_t interval_ms = 0;  // its length
  uint8_t tier_mask = 0;     // bit TierId: the tier exists
  uint8_t namespace_count = 0;
  uint64_t commands = 0;       // every command the server processed in the interval
  uint64_t lookup_blocks = 0;  // all namespaces
  uint64_t hit_blocks = 0;
  std::array<HistoryTierSample, kTierCount> tiers{};
  std::array<HistoryNamespaceSample, kHistoryNamespaces> namespaces{};  // namespace_count used
  std::array<HistoryRequestSample, kRequestOpCount> requests{};         // by RequestOp
};

inline constexpr size_t kMaxHistorySampleBytes = 600;
static_assert(sizeof(HistorySample) <= kMaxHistorySampleBytes,
              "the memory figure of metrics.history (deploy/kvtierd.yaml) assumes this");

class StatsHistory {
 public:
  // `interval`: how often the owner calls Record (the JSON says it, and it stands in for the
  // length of an interval whose start is unknown). `capacity` >= 1 samples are kept.
  // `histograms`: whether the server records request latency (metrics.histograms); without it
  // the samples have no per-op numbers.
  StatsHistory(std::chrono::milliseconds interval, size_t capacity, bool histograms);

  // Appends the sample of the interval since the previous Record, which ends at `unix_ms`. The
  // first Record's interval starts when the counters started (the daemon's start). A counter
  // that went down (a namespace dropped and registered again) counts from zero.
  void Record(int64_t unix_ms, const store::StoreStats& stats, const ProcessInfo& process)
      EXCLUDES(mu_);

  // {"enabled":true,"interval_ms":..,"capacity":..,"histograms":true|false,
  //  "namespace_labels":{"<ns ref>":"<label>"},
  //  "samples":[{"unix_ms":..,"interval_ms":..,"commands":..,"commands_per_s":..,
  //   "lookup_blocks":..,"hit_blocks":..,"hit_ratio":..,
  //   "tiers":{"host":{"used_bytes":..,"capacity_bytes":..,"used_ratio":..,"hit_blocks":..,
  //     "hit_ratio":..,"evictions":..,"demotions":..,"promotions":..}},
  //   "namespaces":{"<ns ref>":{"lookup_blocks":..,"hit_blocks":..,"hit_ratio":..}},
  //   "requests":{"lookup":{"count":..,"per_s":..,"p50_us":..,"p99_us":..},"get":..,"put":..,
  //     "commit":..}}]}
  // Oldest sample first. A ratio is null when nothing was asked in the interval (a tier's
  // hit_ratio: its share of all blocks asked); a percentile is null when the op had no command;
  // "requests" is {} without histograms.
  std::string ToJson() const EXCLUDES(mu_);

  // Samples held now (at most capacity).
  size_t size() const EXCLUDES(mu_);

  // The JSON of a daemon with metrics.history off: {"enabled":false,"samples":[]}.
  static std::string DisabledJson();

 private:
  // A namespace's counters at the previous Record.
  struct NamespaceCounters {
    std::string label;
    uint64_t lookup_blocks = 0;
    std::array<uint64_t, kTierCount> hit_blocks{};
  };

  HistorySample Difference(int64_t unix_ms, const store::StoreStats& stats,
                           const ProcessInfo& process) REQUIRES(mu_);
  void DifferenceNamespaces(const store::StoreStats& stats, HistorySample& sample) REQUIRES(mu_);
  void DifferenceRequests(const ProcessInfo& process, HistorySample& sample) REQUIRES(mu_);

  const std::chrono::milliseconds interval_;
  const size_t capacity_;
  const bool histograms_;

  mutable Mutex mu_;
  std::vector<HistorySample> ring_ GUARDED_BY(mu_);  // grows to capacity_, then wraps
  size_t next_ GUARDED_BY(mu_) = 0;                  // where the next sample goes once full
  // The counters of the previous Record.
  int64_t last_unix_ms_ GUARDED_BY(mu_) = 0;
  uint64_t last_commands_ GUARDED_BY(mu_) = 0;
  std::array<uint64_t, kTierCount> last_evictions_ GUARDED_BY(mu_){};
  std::array<uint64_t, kTierCount> last_demotions_ GUARDED_BY(mu_){};
  std::array<uint64_t, kTierCount> last_promotions_ GUARDED_BY(mu_){};
  std::unordered_map<NamespaceId, NamespaceCounters, Key128Hash> last_namespaces_ GUARDED_BY(mu_);
  std::array<LatencySnapshot, kRequestOpCount> last_requests_ GUARDED_BY(mu_){};
};

}  // namespace kvtier::metrics
