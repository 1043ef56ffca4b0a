#include "daemon/metrics/latency_format.h"

#include <cmath>
#include <cstdio>
#include <string_view>

#include "daemon/metrics/prometheus_text.h"

namespace kvtier::metrics {
namespace {

using nlohmann::json;
using prometheus::Header;
using prometheus::Sample;

constexpr std::string_view kRequestMetric = "kvtier_request_duration_seconds";
constexpr std::string_view kMoveMetric = "kvtier_tier_move_duration_seconds";
constexpr std::string_view kMovedBytesMetric = "kvtier_tier_moved_bytes_total";

// Microseconds rounded to a tenth: the buckets are factors of two wide, more digits mean nothing.
double RoundedMicros(double us) { return std::round(us * 10) / 10; }

void AddSummary(json& out, const LatencySnapshot& h) {
  out["sum_us"] = h.sum_ns / 1000;
  out["p50_us"] = RoundedMicros(h.QuantileMicros(0.5));
  out["p99_us"] = RoundedMicros(h.QuantileMicros(0.99));
}

std::string RequestLabelText(const RequestLabels& l) {
  return "op=\"" + std::string(RequestOpName(l.op)) + "\",path=\"" +
         std::string(RequestPathName(l.path)) + "\",tier=\"" +
         std::string(RequestTierName(l.tier)) + "\"";
}

std::string MoveLabelText(const store::MoveSeries& m, bool with_kind) {
  std::string out = with_kind ? "kind=\"" + std::string(m.kind()) + "\"," : "";
  return out + "from=\"" + std::string(TierName(m.from)) + "\",to=\"" +
         std::string(TierName(m.to)) + "\"";
}

// One histogram series: cumulative `le` buckets (the last is +Inf, the count), _sum, _count.
void HistogramSeries(std::string& out, std::string_view name, const std::string& labels,
                     const LatencySnapshot& h) {
  const std::string metric(name);
  const std::string bucket = metric + "_bucket";
  for (size_t b = 0; b < kLatencyBuckets; ++b) {
    Sample(out, bucket, labels + ",le=\"" + LatencyBucketLabel(b) + "\"",
           static_cast<double>(h.CumulativeCount(b)), "%.0f");
  }
  Sample(out, metric + "_sum", labels, h.sum_seconds(), "%.9g");
  Sample(out, metric + "_count", labels, static_cast<double>(h.count()), "%.0f");
}

std::string InfoSummary(const LatencySnapshot& h) {
  char text[96];
  std::snprintf(text, sizeof text, "p50_us=%.1f,p99_us=%.1f", h.QuantileMicros(0.5),
                h.QuantileMicros(0.99));
  return text;
}

}  // namespace

json RequestLatencyJson(const std::vector<RequestLatencySeries>& requests) {
  json out = json::array();
  for (const RequestLatencySeries& r : requests) {
    json series = {{"op", RequestOpName(r.labels.op)},
                   {"path", RequestPathName(r.labels.path)},
                   {"tier", RequestTierName(r.labels.tier)},
                   {"count", r.latency.count()}};
    AddSummary(series, r.latency);
    out.push_back(std::move(series));
  }
  return out;
}

json MovesJson(const std::vector<store::MoveSeries>& moves) {
  json out = json::array();
  for (const store::MoveSeries& m : moves) {
    json series = {{"kind", m.kind()},
                   {"from", TierName(m.from)},
                   {"to", TierName(m.to)},
                   {"blocks", m.blocks},
                   {"bytes", m.bytes}};
    if (m.timed) AddSummary(series, m.latency);
    out.push_back(std::move(series));
  }
  return out;
}

void AppendLatencyPrometheus(std::string& out, const std::vector<RequestLatencySeries>& requests,
                             const std::vector<store::MoveSeries>& moves) {
  Header(out, kRequestMetric, "histogram",
         "Time to serve a lookup, get, put or shared-memory commit, from the parsed command to "
         "its reply (waits for the tier mover included), by op, data path and tier.");
  for (const RequestLatencySeries& r : requests) {
    HistogramSeries(out, kRequestMetric, RequestLabelText(r.labels), r.latency);
  }
  Header(out, kMoveMetric, "histogram",
         "Time to move one block between tiers (copy and index update), by kind, from and to.");
  for (const store::MoveSeries& m : moves) {
    // With metrics.histograms off the moves are counted (below) but not timed.
    if (m.timed) HistogramSeries(out, kMoveMetric, MoveLabelText(m, true), m.latency);
  }
  Header(out, kMovedBytesMetric, "counter", "Block bytes moved from one tier to another.");
  for (const store::MoveSeries& m : moves) {
    Sample(out, kMovedBytesMetric, MoveLabelText(m, false), static_cast<double>(m.bytes), "%.0f");
  }
}

void AppendLatencyInfo(std::string& out, const std::vector<RequestLatencySeries>& requests,
                       const std::vector<store::MoveSeries>& moves) {
  for (const RequestLatencySeries& r : requests) {
    out += "request_" + std::string(RequestOpName(r.labels.op)) + "_" +
           std::string(RequestPathName(r.labels.path)) + "_" +
           std::string(RequestTierName(r.labels.tier)) +
           ":count=" + std::to_string(r.latency.count()) + "," + InfoSummary(r.latency) + "\r\n";
  }
  for (const store::MoveSeries& m : moves) {
    out += "move_" + std::string(TierName(m.from)) + "_" + std::string(TierName(m.to)) +
           ":blocks=" + std::to_string(m.blocks) + ",bytes=" + std::to_string(m.bytes) +
           (m.timed ? "," + InfoSummary(m.latency) : "") + "\r\n";
  }
}

}  // namespace kvtier::metrics
