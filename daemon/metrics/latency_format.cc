#include "daemon/metrics/latency_format.h"

#include <cmath>
#include <cstdio>

namespace kvtier::metrics {
namespace {

using nlohmann::json;

constexpr const char* kRequestMetric = "kvtier_request_duration_seconds";
constexpr const char* kMoveMetric = "kvtier_tier_move_duration_seconds";
constexpr const char* kMovedBytesMetric = "kvtier_tier_moved_bytes_total";

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

void Header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n";
  out += std::string("# TYPE ") + name + " " + type + "\n";
}

void Line(std::string& out, const char* name, const char* suffix, const std::string& labels,
          const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  out.append(name).append(suffix).append("{").append(labels).append("} ").append(text).append("\n");
}

// One histogram series: cumulative `le` buckets (the last is +Inf, the count), _sum, _count.
void HistogramSeries(std::string& out, const char* name, const std::string& labels,
                     const LatencySnapshot& h) {
  for (size_t b = 0; b < kLatencyBuckets; ++b) {
    Line(out, name, "_bucket", labels + ",le=\"" + LatencyBucketLabel(b) + "\"", "%.0f",
         static_cast<double>(h.CumulativeCount(b)));
  }
  Line(out, name, "_sum", labels, "%.9g", h.sum_seconds());
  Line(out, name, "_count", labels, "%.0f", static_cast<double>(h.count()));
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
    Line(out, kMovedBytesMetric, "", MoveLabelText(m, false), "%.0f", static_cast<double>(m.bytes));
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
