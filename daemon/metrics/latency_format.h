// The latency histograms of StatsToJson, StatsToPrometheus and StatsToInfoSection (stats_format.h):
// requests by op, path and tier (RequestLatency) and moves between tiers (MoveStats). Internal to
// daemon/metrics; stats_format.cc calls these so that every view renders the same snapshots.
//
// Pure functions of their inputs; safe from any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/metrics/request_latency.h"
#include "daemon/store/store_stats.h"

namespace kvtier::metrics {

// [{"op","path","tier","count","sum_us","p50_us","p99_us"}], one per series.
nlohmann::json RequestLatencyJson(const std::vector<RequestLatencySeries>& requests);
// [{"kind","from","to","blocks","bytes","sum_us","p50_us","p99_us"}], one per pair of tiers; the
// last three only when the moves are timed (metrics.histograms).
nlohmann::json MovesJson(const std::vector<store::MoveSeries>& moves);

// kvtier_request_duration_seconds, kvtier_tier_move_duration_seconds (histograms) and
// kvtier_tier_moved_bytes_total (a counter), appended to `out` in the text exposition format.
void AppendLatencyPrometheus(std::string& out, const std::vector<RequestLatencySeries>& requests,
                             const std::vector<store::MoveSeries>& moves);

// INFO fields: request_<op>_<path>_<tier>:count=..,p50_us=..,p99_us=.. and
// move_<from>_<to>:blocks=..,bytes=..,p50_us=..,p99_us=..
void AppendLatencyInfo(std::string& out, const std::vector<RequestLatencySeries>& requests,
                       const std::vector<store::MoveSeries>& moves);

}  // namespace kvtier::metrics
