#include "daemon/metrics/stats_format.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "daemon/metrics/latency_format.h"
#include "daemon/metrics/prometheus_text.h"
#include "hashing/namespace_descriptor.h"

namespace kvtier::metrics {
namespace {

using nlohmann::json;
using prometheus::Escape;
using prometheus::Header;
using prometheus::Sample;

std::string NamespaceLabel(const store::NamespaceStats& ns) {
  return ns.label.empty() ? hashing::NamespaceRef(ns.id) : ns.label;
}

// `namespace="<label>",ns_ref="<ref>"`. The human label alone is not unique (two tenants of one
// model differ only in their salt), and Prometheus rejects a scrape with duplicate series; the
// ref is (and, unlike the id, gives no access to the namespace's blocks).
std::string NamespaceLabels(const store::NamespaceStats& ns) {
  return "namespace=\"" + Escape(NamespaceLabel(ns)) + "\",ns_ref=\"" +
         hashing::NamespaceRef(ns.id) + "\"";
}

// The fields every view renders, each named once for JSON (/stats, KVT.STATS, the dashboard) and
// once for Prometheus, so that a counter added to the store reaches both or neither.
struct TierField {
  const char* json;
  const char* metric;
  const char* type;
  const char* help;
  double (*get)(const store::TierStatsSnapshot&);
  bool ratio = false;  // a fraction; every other field is a count, an integer in JSON
};
const TierField kTierFields[] = {
    {"capacity_bytes", "kvtier_tier_capacity_bytes", "gauge", "Bytes the tier may hold.",
     [](const store::TierStatsSnapshot& t) { return double(t.space.capacity_bytes); }},
    {"used_bytes", "kvtier_tier_used_bytes", "gauge", "Bytes of blocks stored in the tier.",
     [](const store::TierStatsSnapshot& t) { return double(t.space.used_bytes); }},
    {"reserved_bytes", "kvtier_tier_reserved_bytes", "gauge",
     "Bytes the tier has set aside in slabs (used or free within them).",
     [](const store::TierStatsSnapshot& t) { return double(t.space.reserved_bytes); }},
    {"blocks", "kvtier_tier_blocks", "gauge", "Blocks stored in the tier.",
     [](const store::TierStatsSnapshot& t) { return double(t.space.block_count); }},
    {"fragmentation", "kvtier_tier_fragmentation_ratio", "gauge",
     "Share of reserved bytes holding no block.",
     [](const store::TierStatsSnapshot& t) { return t.space.fragmentation; }, true},
    {"evictions", "kvtier_tier_evictions_total", "counter",
     "Blocks that left the tier under pressure (demoted or dropped).",
     [](const store::TierStatsSnapshot& t) { return double(t.evictions); }},
    {"demotions", "kvtier_tier_demotions_total", "counter", "Blocks moved to the next tier.",
     [](const store::TierStatsSnapshot& t) { return double(t.demotions); }},
    {"copy_demotions", "kvtier_tier_copy_demotions_total", "counter",
     "Of the demotions, blocks moved into their copy already on the next tier (write-through, "
     "or kept from a read up): nothing was written.",
     [](const store::TierStatsSnapshot& t) { return double(t.copy_demotions); }},
    {"drops", "kvtier_tier_drops_total", "counter", "Blocks dropped from the tier.",
     [](const store::TierStatsSnapshot& t) { return double(t.drops); }},
    {"admission_drops", "kvtier_tier_admission_drops_total", "counter",
     "Victims dropped because the next tier's admission policy refused them.",
     [](const store::TierStatsSnapshot& t) { return double(t.admission_drops); }},
    {"lag_drops", "kvtier_tier_lag_drops_total", "counter",
     "Victims a put dropped because the mover had not yet written them to the next tier (a "
     "disk).",
     [](const store::TierStatsSnapshot& t) { return double(t.lag_drops); }},
    {"promotions", "kvtier_tier_promotions_total", "counter",
     "Blocks moved up out of the tier (read often, or read on NVMe).",
     [](const store::TierStatsSnapshot& t) { return double(t.promotions); }},
    {"corrupt_drops", "kvtier_tier_corrupt_drops_total", "counter",
     "Blocks whose stored bytes failed verification or could not be read (dropped, served as "
     "misses).",
     [](const store::TierStatsSnapshot& t) { return double(t.corrupt_drops); }},
    {"copy_errors", "kvtier_tier_copy_errors_total", "counter",
     "Moves into or out of the tier whose copy failed with a device error.",
     [](const store::TierStatsSnapshot& t) { return double(t.copy_errors); }},
};

struct NamespaceField {
  const char* json;
  const char* metric;
  const char* help;
  uint64_t store::NamespaceStats::*field;
};
const NamespaceField kNamespaceFields[] = {
    {"lookups", "kvtier_lookups_total", "Lookup calls per namespace.",
     &store::NamespaceStats::lookups},
    {"lookup_blocks", "kvtier_lookup_blocks_total", "Block keys asked for in lookups.",
     &store::NamespaceStats::lookup_blocks},
    {"hit_tokens", "kvtier_hit_tokens_total", "Prompt tokens covered by lookup hits.",
     &store::NamespaceStats::hit_tokens},
    {"miss_blocks", "kvtier_miss_blocks_total", "Block keys asked for in lookups and not found.",
     &store::NamespaceStats::miss_blocks},
    {"puts", "kvtier_namespace_puts_total", "Committed puts of the namespace.",
     &store::NamespaceStats::puts},
    {"put_bytes", "kvtier_namespace_put_bytes_total", "Bytes of the namespace's committed puts.",
     &store::NamespaceStats::put_bytes},
    {"gets", "kvtier_namespace_gets_total", "Reads of the namespace's blocks (leases granted).",
     &store::NamespaceStats::gets},
    {"get_misses", "kvtier_namespace_get_misses_total",
     "Reads of the namespace that found no block.", &store::NamespaceStats::get_misses},
    {"evictions", "kvtier_namespace_evictions_total",
     "Blocks of the namespace evicted from the cache: dropped from a tier, not moved down "
     "(the last tier, or a lower tier that did not take them).",
     &store::NamespaceStats::evictions},
};

struct TotalField {
  const char* json;
  const char* metric;
  const char* type;
  const char* help;
  uint64_t store::StoreStats::*field;
};
const TotalField kTotalFields[] = {
    {"blocks_present", "kvtier_blocks", "gauge", "Ready blocks in all tiers.",
     &store::StoreStats::blocks_present},
    {"blocks_writing", "kvtier_blocks_writing", "gauge", "Blocks reserved and not committed yet.",
     &store::StoreStats::blocks_writing},
    {"blocks_quarantined", "kvtier_blocks_quarantined", "gauge",
     "Slots of puts that timed out, held until the late writer finishes.",
     &store::StoreStats::blocks_quarantined},
    {"blocks_shadowed", "kvtier_blocks_shadowed", "gauge",
     "Memory blocks that also have a copy on NVMe (write-through, or kept from a read up from "
     "NVMe), so that their eviction writes nothing.",
     &store::StoreStats::blocks_shadowed},
    {"shadow_bytes", "kvtier_shadow_bytes", "gauge",
     "Room on NVMe those copies take (with their record headers; part of the NVMe tier's used "
     "room, and not evictable there).",
     &store::StoreStats::shadow_bytes},
    {"leases_active", "kvtier_leases_active", "gauge", "Read leases held now.",
     &store::StoreStats::leases_active},
    {"committed_puts", "kvtier_puts_total", "counter", "Committed puts.",
     &store::StoreStats::committed_puts},
    {"aborted_puts", "kvtier_aborted_puts_total", "counter",
     "Puts given back (aborted, timed out, or their namespace dropped).",
     &store::StoreStats::aborted_puts},
    {"busy_puts", "kvtier_busy_puts_total", "counter", "Puts refused for lack of room.",
     &store::StoreStats::busy_puts},
    {"not_admitted_blocks", "kvtier_not_admitted_blocks_total", "counter",
     "Blocks a full last tier's eviction policy did not take while it thrashed (sticky): puts "
     "answered REJECTED, demotions dropped.",
     &store::StoreStats::not_admitted_blocks},
    {"removed_blocks", "kvtier_removed_blocks_total", "counter",
     "Blocks removed (DEL, namespace drops, corrupt blocks).", &store::StoreStats::removed_blocks},
    {"evicted_blocks", "kvtier_evicted_blocks_total", "counter",
     "Blocks evicted from the cache: dropped from a tier, not moved down (the last tier, or a "
     "lower tier that did not take them).",
     &store::StoreStats::evicted_blocks},
    {"expired_leases", "kvtier_expired_leases_total", "counter",
     "Leases taken back at their deadline.", &store::StoreStats::expired_leases},
    {"expired_reservations", "kvtier_expired_reservations_total", "counter",
     "Puts whose writer did not commit in time.", &store::StoreStats::expired_reservations},
    {"adopted_blocks", "kvtier_adopted_blocks_total", "counter",
     "Blocks found on NVMe at start-up and served again.", &store::StoreStats::adopted_blocks},
    {"write_throughs", "kvtier_write_throughs_total", "counter",
     "Puts also written to NVMe before they were acknowledged (nvme.write_through).",
     &store::StoreStats::write_throughs},
    {"write_through_failures", "kvtier_write_through_failures_total", "counter",
     "Puts NVMe could not take with write-through on: kept in memory only and answered with the "
     "reason.",
     &store::StoreStats::write_through_failures},
    {"write_through_timeouts", "kvtier_write_through_timeouts_total", "counter",
     "Puts whose NVMe copy took longer than limits.mover_wait_ms with write-through on: answered "
     "TIMEOUT (in memory only; the copy may still land).",
     &store::StoreStats::write_through_timeouts},
    {"gpu_candidates", "kvtier_gpu_candidates_total", "counter",
     "Host blocks queued for promotion into the GPU tier.", &store::StoreStats::gpu_candidates},
    {"gpu_candidates_dropped", "kvtier_gpu_candidates_dropped_total", "counter",
     "Promotion candidates refused because the queue was full.",
     &store::StoreStats::gpu_candidates_dropped},
    {"gpu_promotions_skipped", "kvtier_gpu_promotions_skipped_total", "counter",
     "Promotion candidates not moved (changed, leased, no room or a copy error).",
     &store::StoreStats::gpu_promotions_skipped},
    {"pending_promotions", "kvtier_pending_promotions", "gauge",
     "Promotion candidates waiting for the GPU mover now.", &store::StoreStats::pending_promotions},
    {"pending_adoptions", "kvtier_pending_adoptions", "gauge",
     "Blocks found on NVMe at start-up and not served yet (recovery runs while the daemon "
     "serves; they are misses until then).",
     &store::StoreStats::pending_adoptions},
    {"remote_publishes", "kvtier_remote_publishes_total", "counter",
     "Blocks written to the remote tier: before the last local tier dropped them, or at their "
     "commit (remote.write_through).",
     &store::StoreStats::remote_publishes},
    {"remote_publish_bytes", "kvtier_remote_publish_bytes_total", "counter",
     "Payload bytes of the blocks written to the remote tier.",
     &store::StoreStats::remote_publish_bytes},
    {"remote_publish_errors", "kvtier_remote_publish_errors_total", "counter",
     "Blocks that did not reach the remote tier (unreadable, or refused or not answered by the "
     "remote store in time): a dropped block is lost, a write-through's stays local.",
     &store::StoreStats::remote_publish_errors},
    {"remote_write_through_skips", "kvtier_remote_write_through_skips_total", "counter",
     "Committed blocks not copied to the remote tier because too many copies were waiting for "
     "it (remote.write_through).",
     &store::StoreStats::remote_write_through_skips},
    {"remote_publishes_saved", "kvtier_remote_publishes_saved_total", "counter",
     "Blocks the last local tier dropped without writing them to the remote tier again: written "
     "through less than half of remote.ttl_seconds before.",
     &store::StoreStats::remote_publishes_saved},
    {"remote_fetches", "kvtier_remote_fetches_total", "counter",
     "Blocks fetched from the remote tier into host memory for a reader.",
     &store::StoreStats::remote_fetches},
    {"remote_fetch_bytes", "kvtier_remote_fetch_bytes_total", "counter",
     "Payload bytes of the blocks fetched from the remote tier.",
     &store::StoreStats::remote_fetch_bytes},
    {"remote_fetch_misses", "kvtier_remote_fetch_misses_total", "counter",
     "Reads the remote tier had no block for.", &store::StoreStats::remote_fetch_misses},
    {"remote_fetch_corrupt", "kvtier_remote_fetch_corrupt_total", "counter",
     "Records fetched from the remote tier that failed verification (served as misses).",
     &store::StoreStats::remote_fetch_corrupt},
    {"remote_fetch_errors", "kvtier_remote_fetch_errors_total", "counter",
     "Fetches from the remote tier that failed (timeout, remote error, no room in host).",
     &store::StoreStats::remote_fetch_errors},
    {"remote_fetches_expired", "kvtier_remote_fetches_expired_total", "counter",
     "Remote fetches dropped unsent: asked for longer than limits.mover_wait_ms ago, their "
     "readers had stopped waiting.",
     &store::StoreStats::remote_fetches_expired},
};

// Named counters (a tier's device counters, the remote client's) as one JSON object.
json CountersJson(const std::vector<std::pair<std::string, double>>& counters) {
  json out = json::object();
  for (const auto& [name, value] : counters) out[name] = value;
  return out;
}

json TierJson(const store::TierStatsSnapshot& t) {
  json out = {{"tier", TierName(t.tier)}};
  for (const TierField& f : kTierFields) {
    if (f.ratio) {
      out[f.json] = f.get(t);
    } else {
      out[f.json] = static_cast<uint64_t>(f.get(t));
    }
  }
  out["device"] = CountersJson(t.device);
  return out;
}

json NamespaceJson(const store::NamespaceStats& ns, NamespaceIds ids) {
  json hits = json::object();
  for (int t = 0; t < kTierCount; ++t) {
    hits[std::string(TierName(static_cast<TierId>(t)))] = ns.hit_blocks[t];
  }
  json out = {{"ref", hashing::NamespaceRef(ns.id)},
              {"label", ns.label},
              {"registered", ns.registered},
              {"tokens_per_block", ns.tokens_per_block},
              {"hit_blocks", hits},
              {"block_hit_ratio", ns.block_hit_ratio()}};
  if (ids == NamespaceIds::kShown) out["id"] = ns.id.ToHex();
  for (const NamespaceField& f : kNamespaceFields) out[f.json] = ns.*f.field;
  return out;
}

json TotalsJson(const store::StoreStats& s) {
  json out = json::object();
  for (const TotalField& f : kTotalFields) out[f.json] = s.*f.field;
  return out;
}

}  // namespace

std::string StatsToJson(const store::StoreStats& stats, const ProcessInfo& process,
                        NamespaceIds ids) {
  json doc;
  doc["tiers"] = json::array();
  for (const auto& t : stats.tiers) doc["tiers"].push_back(TierJson(t));
  doc["namespaces"] = json::array();
  for (const auto& ns : stats.namespaces) doc["namespaces"].push_back(NamespaceJson(ns, ids));
  doc["totals"] = TotalsJson(stats);
  doc["remote_client"] = CountersJson(stats.remote_client);
  doc["process"] = {{"version", process.version},
                    {"uptime_s", process.uptime_s},
                    {"connected_clients", process.connected_clients},
                    {"total_connections", process.total_connections},
                    {"commands_processed", process.commands_processed},
                    {"protocol_errors", process.protocol_errors},
                    {"lapsed_reply_leases", process.lapsed_reply_leases},
                    {"stalled_reply_closes", process.stalled_reply_closes},
                    {"staged_set_values", process.staged_set_values},
                    {"rejected_connections", process.rejected_connections},
                    {"failed_accepts", process.failed_accepts},
                    {"gpu_tier", process.gpu_tier_note},
                    {"nvme_tier", process.nvme_tier_note}};
  doc["requests"] = RequestLatencyJson(process.requests);
  doc["moves"] = MovesJson(stats.moves);
  return JsonText(doc);
}

std::string StatsToPrometheus(const store::StoreStats& stats, const ProcessInfo& process) {
  std::string out;
  for (const TierField& f : kTierFields) {
    Header(out, f.metric, f.type, f.help);
    for (const auto& t : stats.tiers) {
      Sample(out, f.metric, "tier=\"" + std::string(TierName(t.tier)) + "\"", f.get(t));
    }
  }
  // Device counters (NVMe reads, device bytes written, I/O errors, ...) under one family, one
  // series per tier and counter name.
  Header(out, "kvtier_tier_device", "gauge",
         "Device counters of a tier (see the counter label; docs/nvme-format.md for NVMe).");
  for (const auto& t : stats.tiers) {
    for (const auto& [name, value] : t.device) {
      Sample(out, "kvtier_tier_device",
             "tier=\"" + std::string(TierName(t.tier)) + "\",counter=\"" + name + "\"", value);
    }
  }
  // The remote tier's client (timeouts, breaker openings, redirects, ...) under one family.
  Header(out, "kvtier_remote_client", "gauge",
         "Counters of the remote tier's client (see the counter label; docs/scale-out.md).");
  for (const auto& [name, value] : stats.remote_client) {
    Sample(out, "kvtier_remote_client", "counter=\"" + name + "\"", value);
  }
  for (const NamespaceField& f : kNamespaceFields) {
    Header(out, f.metric, "counter", f.help);
    for (const auto& ns : stats.namespaces) {
      Sample(out, f.metric, NamespaceLabels(ns), double(ns.*f.field));
    }
  }
  Header(out, "kvtier_hit_blocks_total", "counter", "Blocks found in lookups, by tier.");
  for (const auto& ns : stats.namespaces) {
    for (int t = 0; t < kTierCount; ++t) {
      Sample(
          out, "kvtier_hit_blocks_total",
          NamespaceLabels(ns) + ",tier=\"" + std::string(TierName(static_cast<TierId>(t))) + "\"",
          double(ns.hit_blocks[t]));
    }
  }
  struct Scalar {
    const char* name;
    const char* type;
    const char* help;
    double value;
  };
  const Scalar scalars[] = {
      {"kvtier_connected_clients", "gauge", "Open client connections.",
       double(process.connected_clients)},
      {"kvtier_connections_total", "counter", "Client connections accepted since the start.",
       double(process.total_connections)},
      {"kvtier_commands_total", "counter", "Commands processed.",
       double(process.commands_processed)},
      {"kvtier_protocol_errors_total", "counter", "Connections closed for malformed input.",
       double(process.protocol_errors)},
      {"kvtier_lapsed_reply_leases_total", "counter",
       "Large replies cut short (connection closed) because their lease lapsed mid-send.",
       double(process.lapsed_reply_leases)},
      {"kvtier_stalled_reply_closes_total", "counter",
       "Connections closed because the client took no piece of a large reply within "
       "half of store.lease_timeout_ms.",
       double(process.stalled_reply_closes)},
      {"kvtier_staged_set_values_total", "counter",
       "SET values received straight into their arena slot instead of copied there.",
       double(process.staged_set_values)},
      {"kvtier_rejected_connections_total", "counter",
       "Connections refused: max_clients reached, or a uid not allowed.",
       double(process.rejected_connections)},
      {"kvtier_failed_accepts_total", "counter",
       "Accepts of a client connection that failed (usually EMFILE: out of descriptors); each "
       "is retried after 50 ms.",
       double(process.failed_accepts)},
      {"kvtier_uptime_seconds", "gauge", "Seconds since the daemon started.",
       double(process.uptime_s)},
  };
  for (const TotalField& f : kTotalFields) {
    Header(out, f.metric, f.type, f.help);
    Sample(out, f.metric, "", double(stats.*f.field));
  }
  for (const Scalar& s : scalars) {
    Header(out, s.name, s.type, s.help);
    Sample(out, s.name, "", s.value);
  }
  AppendLatencyPrometheus(out, process.requests, stats.moves);
  Header(out, "kvtier_build_info", "gauge", "Always 1; the version label says which kvtierd runs.");
  Sample(out, "kvtier_build_info", "version=\"" + Escape(process.version) + "\"", 1);
  return out;
}

std::string StatsToInfoSection(const store::StoreStats& stats, const ProcessInfo& process) {
  std::string out;
  auto field = [&out](const std::string& name, const std::string& value) {
    out += name + ":" + value + "\r\n";
  };
  auto counters = [&field](const std::string& prefix,
                           const std::vector<std::pair<std::string, double>>& named) {
    for (const auto& [name, value] : named) {
      char text[32];
      std::snprintf(text, sizeof text, "%.15g", value);
      field(prefix + name, text);
    }
  };
  // The same fields as the JSON views, under their JSON names (tier fields prefixed by the tier).
  for (const TotalField& f : kTotalFields) field(f.json, std::to_string(stats.*f.field));
  // Why a tier is absent, as /stats says it (a note has no CR or LF: an INFO line cannot hold one).
  for (const auto& [name, note] : {std::pair{"gpu_tier", &process.gpu_tier_note},
                                   std::pair{"nvme_tier", &process.nvme_tier_note}}) {
    if (note->empty()) continue;
    std::string line = *note;
    std::replace_if(
        line.begin(), line.end(), [](char c) { return c == '\r' || c == '\n'; }, ' ');
    field(name, line);
  }
  for (const auto& t : stats.tiers) {
    const std::string p = "tier_" + std::string(TierName(t.tier)) + "_";
    for (const TierField& f : kTierFields) {
      char text[32];
      std::snprintf(text, sizeof text, f.ratio ? "%.4f" : "%.0f", f.get(t));
      field(p + f.json, text);
    }
    counters(p, t.device);
  }
  counters("remote_client_", stats.remote_client);
  for (const auto& ns : stats.namespaces) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.4f", ns.block_hit_ratio());
    field("ns_" + hashing::NamespaceRef(ns.id),
          "lookups=" + std::to_string(ns.lookups) +
              ",lookup_blocks=" + std::to_string(ns.lookup_blocks) +
              ",hit_blocks=" + std::to_string(ns.total_hit_blocks()) + ",hit_ratio=" + ratio +
              ",remote_hit_blocks=" +
              std::to_string(ns.hit_blocks[static_cast<size_t>(TierId::kRemote)]) +
              ",evictions=" + std::to_string(ns.evictions));
  }
  AppendLatencyInfo(out, process.requests, stats.moves);
  return out;
}

}  // namespace kvtier::metrics
