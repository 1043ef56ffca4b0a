#include "daemon/metrics/stats_history.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "hashing/namespace_descriptor.h"

namespace kvtier::metrics {
namespace {

using nlohmann::json;

// now - before, or now when the counter went down (it started again from zero).
uint64_t Delta(uint64_t now, uint64_t before) { return now >= before ? now - before : now; }

// The observations of `now` that `before` does not hold: the histogram of the interval.
LatencySnapshot Delta(const LatencySnapshot& now, const LatencySnapshot& before) {
  LatencySnapshot out;
  for (size_t b = 0; b < kLatencyBuckets; ++b)
    out.buckets[b] = Delta(now.buckets[b], before.buckets[b]);
  out.sum_ns = Delta(now.sum_ns, before.sum_ns);
  return out;
}

// part / whole, or null when whole is 0.
json Ratio(uint64_t part, uint64_t whole) {
  return whole == 0 ? json(nullptr) : json(static_cast<double>(part) / static_cast<double>(whole));
}

double PerSecond(uint64_t count, uint32_t interval_ms) {
  return interval_ms == 0 ? 0.0 : static_cast<double>(count) * 1000.0 / interval_ms;
}

// Microseconds to a tenth, as /stats has them (latency_format.cc).
json Micros(float us, uint64_t count) {
  return count == 0 ? json(nullptr) : json(std::round(static_cast<double>(us) * 10) / 10);
}

json SampleJson(const HistorySample& s, bool histograms) {
  json tiers = json::object();
  for (int t = 0; t < kTierCount; ++t) {
    if ((s.tier_mask & (1u << t)) == 0) continue;
    const HistoryTierSample& ts = s.tiers[t];
    tiers[std::string(TierName(static_cast<TierId>(t)))] = {
        {"used_bytes", ts.used_bytes},
        {"capacity_bytes", ts.capacity_bytes},
        {"used_ratio", Ratio(ts.used_bytes, ts.capacity_bytes)},
        {"hit_blocks", ts.hit_blocks},
        {"hit_ratio", Ratio(ts.hit_blocks, s.lookup_blocks)},
        {"evictions", ts.evictions},
        {"demotions", ts.demotions},
        {"promotions", ts.promotions}};
  }
  json namespaces = json::object();
  for (size_t i = 0; i < s.namespace_count; ++i) {
    const HistoryNamespaceSample& ns = s.namespaces[i];
    namespaces[hashing::NamespaceRef(ns.id)] = {
        {"lookup_blocks", ns.lookup_blocks},
        {"hit_blocks", ns.hit_blocks},
        {"hit_ratio", Ratio(ns.hit_blocks, ns.lookup_blocks)}};
  }
  json requests = json::object();
  for (size_t op = 0; histograms && op < kRequestOpCount; ++op) {
    const HistoryRequestSample& r = s.requests[op];
    requests[std::string(RequestOpName(static_cast<RequestOp>(op)))] = {
        {"count", r.count},
        {"per_s", PerSecond(r.count, s.interval_ms)},
        {"p50_us", Micros(r.p50_us, r.count)},
        {"p99_us", Micros(r.p99_us, r.count)}};
  }
  return {{"unix_ms", s.unix_ms},
          {"interval_ms", s.interval_ms},
          {"commands", s.commands},
          {"commands_per_s", PerSecond(s.commands, s.interval_ms)},
          {"lookup_blocks", s.lookup_blocks},
          {"hit_blocks", s.hit_blocks},
          {"hit_ratio", Ratio(s.hit_blocks, s.lookup_blocks)},
          {"tiers", std::move(tiers)},
          {"namespaces", std::move(namespaces)},
          {"requests", std::move(requests)}};
}

}  // namespace

StatsHistory::StatsHistory(std::chrono::milliseconds interval, size_t capacity, bool histograms)
    : interval_(interval), capacity_(std::max<size_t>(capacity, 1)), histograms_(histograms) {}

void StatsHistory::Record(int64_t unix_ms, const store::StoreStats& stats,
                          const ProcessInfo& process) {
  MutexLock lock(mu_);
  HistorySample sample = Difference(unix_ms, stats, process);
  if (ring_.size() < capacity_) {
    ring_.push_back(sample);
  } else {
    ring_[next_] = sample;
    next_ = (next_ + 1) % capacity_;
  }
}

HistorySample StatsHistory::Difference(int64_t unix_ms, const store::StoreStats& stats,
                                       const ProcessInfo& process) {
  HistorySample s;
  s.unix_ms = unix_ms;
  // The first interval, or one across a step of the wall clock backwards: its nominal length.
  const int64_t elapsed = last_unix_ms_ == 0 ? 0 : unix_ms - last_unix_ms_;
  s.interval_ms = static_cast<uint32_t>(elapsed > 0 ? std::min<int64_t>(elapsed, UINT32_MAX)
                                                    : interval_.count());
  last_unix_ms_ = unix_ms;
  s.commands = Delta(process.commands_processed, last_commands_);
  last_commands_ = process.commands_processed;
  for (const store::TierStatsSnapshot& t : stats.tiers) {
    const auto i = static_cast<size_t>(t.tier);
    s.tier_mask |= static_cast<uint8_t>(1u << i);
    HistoryTierSample& ts = s.tiers[i];
    ts.used_bytes = t.space.used_bytes;
    ts.capacity_bytes = t.space.capacity_bytes;
    ts.evictions = Delta(t.evictions, last_evictions_[i]);
    ts.demotions = Delta(t.demotions, last_demotions_[i]);
    ts.promotions = Delta(t.promotions, last_promotions_[i]);
    last_evictions_[i] = t.evictions;
    last_demotions_[i] = t.demotions;
    last_promotions_[i] = t.promotions;
  }
  DifferenceNamespaces(stats, s);
  DifferenceRequests(process, s);
  return s;
}

// Per namespace and per tier, the blocks asked and found since the previous Record; the sample
// keeps the busiest kHistoryNamespaces namespaces, and its totals count every one.
void StatsHistory::DifferenceNamespaces(const store::StoreStats& stats, HistorySample& s) {
  std::unordered_map<NamespaceId, NamespaceCounters, Key128Hash> now;
  std::vector<HistoryNamespaceSample> asked;
  for (const store::NamespaceStats& ns : stats.namespaces) {
    const auto last = last_namespaces_.find(ns.id);
    const NamespaceCounters before =
        last == last_namespaces_.end() ? NamespaceCounters{} : last->second;
    HistoryNamespaceSample n{ns.id, Delta(ns.lookup_blocks, before.lookup_blocks), 0};
    for (int t = 0; t < kTierCount; ++t) {
      const uint64_t hits = Delta(ns.hit_blocks[t], before.hit_blocks[t]);
      s.tiers[t].hit_blocks += hits;
      n.hit_blocks += hits;
    }
    s.lookup_blocks += n.lookup_blocks;
    s.hit_blocks += n.hit_blocks;
    if (n.lookup_blocks > 0) asked.push_back(n);
    now[ns.id] = {ns.label, ns.lookup_blocks, ns.hit_blocks};
  }
  last_namespaces_ = std::move(now);
  const size_t kept = std::min(asked.size(), kHistoryNamespaces);
  std::partial_sort(asked.begin(), asked.begin() + static_cast<ptrdiff_t>(kept), asked.end(),
                    [](const HistoryNamespaceSample& a, const HistoryNamespaceSample& b) {
                      return a.lookup_blocks > b.lookup_blocks;
                    });
  std::copy_n(asked.begin(), kept, s.namespaces.begin());
  s.namespace_count = static_cast<uint8_t>(kept);
}

// Per op, the latency histogram of the interval (all paths and tiers together) and its
// percentiles.
void StatsHistory::DifferenceRequests(const ProcessInfo& process, HistorySample& s) {
  std::array<LatencySnapshot, kRequestOpCount> now{};
  for (const RequestLatencySeries& r : process.requests) {
    now[static_cast<size_t>(r.labels.op)] += r.latency;
  }
  for (size_t op = 0; op < kRequestOpCount; ++op) {
    const LatencySnapshot interval = Delta(now[op], last_requests_[op]);
    HistoryRequestSample& out = s.requests[op];
    out.count = interval.count();
    out.p50_us = static_cast<float>(interval.QuantileMicros(0.5));
    out.p99_us = static_cast<float>(interval.QuantileMicros(0.99));
  }
  last_requests_ = now;
}

std::string StatsHistory::ToJson() const {
  std::vector<HistorySample> samples;
  json labels = json::object();
  {
    // Copied out so that rendering (milliseconds for a full ring) does not hold up Record.
    MutexLock lock(mu_);
    samples.reserve(ring_.size());
    samples.insert(samples.end(), ring_.begin() + static_cast<ptrdiff_t>(next_), ring_.end());
    samples.insert(samples.end(), ring_.begin(), ring_.begin() + static_cast<ptrdiff_t>(next_));
    for (const auto& [id, ns] : last_namespaces_) {
      if (!ns.label.empty()) labels[hashing::NamespaceRef(id)] = ns.label;
    }
  }
  json doc = {{"enabled", true},
              {"interval_ms", interval_.count()},
              {"capacity", capacity_},
              {"histograms", histograms_},
              {"namespace_labels", std::move(labels)},
              {"samples", json::array()}};
  json& out = doc["samples"];
  for (const HistorySample& s : samples) out.push_back(SampleJson(s, histograms_));
  return JsonText(doc);
}

size_t StatsHistory::size() const {
  MutexLock lock(mu_);
  return ring_.size();
}

std::string StatsHistory::DisabledJson() { return R"({"enabled":false,"samples":[]})"; }

}  // namespace kvtier::metrics
