#include "daemon/cli/stats_table.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "common/units.h"

namespace kvtier::cli {
namespace {

using nlohmann::json;

// The unsigned field `name` of `j`, or nullptr-like absence as -1.
int64_t Count(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end() || !it->is_number()) return -1;
  return it->get<int64_t>();
}

// The string field `name` of `j`, or `absent` when it is missing or not a string (json::value
// would throw on a field of another type).
std::string Text(const json& j, const std::string& name, const std::string& absent = "?") {
  const auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : absent;
}

std::string CountText(int64_t value) { return value < 0 ? "-" : std::to_string(value); }

std::string BytesText(int64_t value) {
  return value < 0 ? "-" : FormatBytes(static_cast<uint64_t>(value));
}

std::string Percent(int64_t part, int64_t whole) {
  if (part < 0 || whole <= 0) return "-";
  char text[16];
  std::snprintf(text, sizeof(text), "%.1f%%", 100.0 * static_cast<double>(part) / whole);
  return text;
}

std::string Row(const char* format, auto... cells) {
  char line[256];
  std::snprintf(line, sizeof(line), format, cells...);
  return line;
}

std::string TierTable(const json& tiers) {
  std::string out = Row("%-6s %12s %12s %7s %10s %10s %10s %10s\n", "TIER", "USED", "CAPACITY",
                        "USE", "BLOCKS", "EVICTIONS", "DEMOTED", "PROMOTED");
  for (const json& t : tiers) {
    if (!t.is_object()) continue;
    const std::string name = Text(t, "tier");
    const int64_t used = Count(t, "used_bytes");
    const int64_t capacity = Count(t, "capacity_bytes");
    out += Row("%-6s %12s %12s %7s %10s %10s %10s %10s\n", name.c_str(), BytesText(used).c_str(),
               BytesText(capacity).c_str(), Percent(used, capacity).c_str(),
               CountText(Count(t, "blocks")).c_str(), CountText(Count(t, "evictions")).c_str(),
               CountText(Count(t, "demotions")).c_str(), CountText(Count(t, "promotions")).c_str());
  }
  return out;
}

// "<title>: name=value ..." for an object of named counters; empty when there are none.
std::string CounterLine(const std::string& title, const json& counters) {
  if (!counters.is_object() || counters.empty()) return "";
  std::string out = title + ":";
  for (const auto& [name, value] : counters.items()) {
    if (!value.is_number()) continue;
    // Counters arrive as JSON doubles; show whole numbers as such (ratios keep their digits).
    const double v = value.get<double>();
    const bool whole = v == static_cast<double>(static_cast<int64_t>(v));
    out += " " + name + "=" + (whole ? std::to_string(static_cast<int64_t>(v)) : value.dump());
  }
  return out + "\n";
}

// One line per tier with device counters: "nvme device: reads=.. writes=.. ...".
std::string DeviceLines(const json& tiers) {
  std::string out;
  for (const json& t : tiers) {
    const auto device = t.find("device");
    if (!t.is_object() || device == t.end()) continue;
    out += CounterLine(Text(t, "tier") + " device", *device);
  }
  return out;
}

// Why a tier is absent ("no GPU tier: built without CUDA"), from the process section.
std::string TierNotes(const json& process) {
  std::string out;
  for (const char* key : {"gpu_tier", "nvme_tier"}) {
    const std::string note = Text(process, key, "");
    if (!note.empty()) out += note + "\n";
  }
  return out;
}

// "label" when the namespace has one, else its ref (the name statistics give it).
std::string NamespaceName(const json& ns) {
  std::string label = Text(ns, "label", "");
  if (!label.empty()) return label.size() > 24 ? label.substr(0, 23) + "~" : label;
  return Text(ns, "ref");
}

std::string NamespaceTable(const json& namespaces) {
  std::string out = Row("%-24s %9s %11s %7s %7s %7s %7s %7s %10s\n", "NAMESPACE", "LOOKUPS",
                        "BLOCKS", "HIT", "GPU", "HOST", "NVME", "REMOTE", "EVICTIONS");
  for (const json& ns : namespaces) {
    if (!ns.is_object()) continue;
    const int64_t asked = Count(ns, "lookup_blocks");
    int64_t by_tier[4] = {-1, -1, -1, -1};
    int64_t hits = -1;
    if (const auto it = ns.find("hit_blocks"); it != ns.end() && it->is_object()) {
      const char* names[4] = {"gpu", "host", "nvme", "remote"};
      hits = 0;
      for (int t = 0; t < 4; ++t) {
        by_tier[t] = Count(*it, names[t]);
        if (by_tier[t] > 0) hits += by_tier[t];
      }
    }
    out += Row("%-24s %9s %11s %7s %7s %7s %7s %7s %10s\n", NamespaceName(ns).c_str(),
               CountText(Count(ns, "lookups")).c_str(), CountText(asked).c_str(),
               Percent(hits, asked).c_str(), Percent(by_tier[0], asked).c_str(),
               Percent(by_tier[1], asked).c_str(), Percent(by_tier[2], asked).c_str(),
               Percent(by_tier[3], asked).c_str(), CountText(Count(ns, "evictions")).c_str());
  }
  if (namespaces.empty()) out += "(no namespaces)\n";
  return out;
}

// A percentile in microseconds ("-" when absent: an older daemon, or moves not timed).
std::string Micros(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end() || !it->is_number()) return "-";
  char text[24];
  std::snprintf(text, sizeof(text), "%.1f", it->get<double>());
  return text;
}

// The latency histograms (requests by op, path and tier; moves by pair of tiers) as percentiles.
std::string LatencyTable(const json& requests, const json& moves) {
  constexpr const char* kRequestRow = "%-7s %-8s %-5s %10s %10s %10s\n";
  constexpr const char* kMoveRow = "%-9s %-5s %-5s %10s %12s %10s %10s\n";
  std::string out = Row(kRequestRow, "REQUEST", "PATH", "TIER", "COUNT", "P50 US", "P99 US");
  for (const json& r : requests) {
    if (!r.is_object()) continue;
    out += Row(kRequestRow, Text(r, "op").c_str(), Text(r, "path").c_str(), Text(r, "tier").c_str(),
               CountText(Count(r, "count")).c_str(), Micros(r, "p50_us").c_str(),
               Micros(r, "p99_us").c_str());
  }
  out += Row(kMoveRow, "MOVE", "FROM", "TO", "BLOCKS", "BYTES", "P50 US", "P99 US");
  for (const json& m : moves) {
    if (!m.is_object()) continue;
    out += Row(kMoveRow, Text(m, "kind").c_str(), Text(m, "from").c_str(), Text(m, "to").c_str(),
               CountText(Count(m, "blocks")).c_str(), BytesText(Count(m, "bytes")).c_str(),
               Micros(m, "p50_us").c_str(), Micros(m, "p99_us").c_str());
  }
  return out;
}

std::string Totals(const json& totals) {
  std::string out = "totals:";
  for (const auto& [name, value] : totals.items()) {
    if (value.is_number()) out += " " + name + "=" + value.dump();
  }
  return out + "\n";
}

}  // namespace

Result<std::string> FormatStatsTable(std::string_view stats_json) {
  const json doc = json::parse(stats_json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgument("KVT.STATS did not return a JSON object");
  }
  std::string out;
  if (const auto it = doc.find("tiers"); it != doc.end() && it->is_array()) {
    out += TierTable(*it) + DeviceLines(*it);
  }
  if (const auto it = doc.find("process"); it != doc.end() && it->is_object()) {
    out += TierNotes(*it);
  }
  // The remote store's client, with a remote tier: connections, calls, errors by kind.
  if (const auto it = doc.find("remote_client"); it != doc.end()) {
    out += CounterLine("remote client", *it);
  }
  if (const auto it = doc.find("namespaces"); it != doc.end() && it->is_array()) {
    out += "\n" + NamespaceTable(*it);
  }
  const auto requests = doc.find("requests");
  const auto moves = doc.find("moves");
  if (requests != doc.end() && requests->is_array() && moves != doc.end() && moves->is_array()) {
    out += "\n" + LatencyTable(*requests, *moves);
  }
  if (const auto it = doc.find("totals"); it != doc.end() && it->is_object()) {
    out += "\n" + Totals(*it);
  }
  return out;
}

}  // namespace kvtier::cli
