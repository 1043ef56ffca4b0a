// The three renderings of the store's statistics: JSON (KVT.STATS, HTTP /stats, `kvtier stats`),
// Prometheus text (HTTP /metrics) and Redis INFO fields (INFO). All three read one StoreStats
// snapshot, so every view shows the same numbers.
//
// Pure functions of their inputs; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "daemon/metrics/request_latency.h"
#include "daemon/store/store_stats.h"

namespace kvtier::metrics {

// Facts about the process that are not store counters.
struct ProcessInfo {
  std::string version;
  uint64_t uptime_s = 0;
  uint64_t connected_clients = 0;
  uint64_t total_connections = 0;
  uint64_t commands_processed = 0;
  uint64_t protocol_errors = 0;
  uint64_t lapsed_reply_leases = 0;   // large replies cut short: their lease lapsed mid-send
  uint64_t stalled_reply_closes = 0;  // clients that took no piece of a large reply in time
  uint64_t staged_set_values = 0;     // SET values received straight into their arena slot
  uint64_t rejected_connections = 0;  // max_clients reached or uid not allowed
  uint64_t failed_accepts = 0;        // accept failed (EMFILE: out of descriptors)
  // Why a tier is absent, for tiers the daemon runs without ("no GPU tier: built without CUDA").
  std::string gpu_tier_note;
  std::string nvme_tier_note;
  // The server's request latency histograms (RequestLatency::Snapshot); empty when they are off.
  std::vector<RequestLatencySeries> requests;
};

// {"tiers":[{"tier":"host","capacity_bytes":..,"used_bytes":..,"reserved_bytes":..,"blocks":..,
//   "fragmentation":..,"evictions":..,"demotions":..,"drops":..}],
//  "namespaces":[{"ref":"<16 hex>","id":"<32 hex>","label":..,"lookups":..,"lookup_blocks":..,
//   "hit_blocks":{"gpu":..,"host":..,"nvme":..,"remote":..},"hit_tokens":..,"miss_blocks":..,
//   "block_hit_ratio":..,"puts":..,"put_bytes":..,"gets":..,"get_misses":..,"evictions":..}],
//  "totals":{...StoreStats scalar fields...},
//  "remote_client":{...the remote client's counters; empty without a remote tier...},
//  "process":{...},
//  "requests":[{"op":"get","path":"shm","tier":"host","count":..,"sum_us":..,"p50_us":..,
//   "p99_us":..}],
//  "moves":[{"kind":"demotion","from":"host","to":"nvme","blocks":..,"bytes":..,"sum_us":..,
//   "p50_us":..,"p99_us":..}]}
// Percentiles are estimated from the histogram buckets as Prometheus' histogram_quantile does.
// A namespace is named by its ref (hashing::NamespaceRef); its "id" is there only with
// NamespaceIds::kShown, for admins: an id lets a client read, explain and drop the namespace's
// blocks, and any client may read these statistics.
enum class NamespaceIds : uint8_t { kHidden, kShown };
std::string StatsToJson(const store::StoreStats& stats, const ProcessInfo& process,
                        NamespaceIds ids = NamespaceIds::kHidden);

// Prometheus text exposition format, version 0.0.4: kvtier_* metrics with `tier` labels, and
// `namespace` (the label given at registration, else the ref) plus `ns_ref` (the namespace's ref,
// which keeps two tenants of one model apart) on per-namespace series; latency histograms
// (kvtier_request_duration_seconds by op, path and tier; kvtier_tier_move_duration_seconds by
// kind, from and to) with power-of-two microsecond buckets (common/latency_histogram.h).
std::string StatsToPrometheus(const store::StoreStats& stats, const ProcessInfo& process);

// The `# Kvtier` section of INFO: "field:value\r\n" lines; a namespace's line is ns_<ref>.
std::string StatsToInfoSection(const store::StoreStats& stats, const ProcessInfo& process);

}  // namespace kvtier::metrics
