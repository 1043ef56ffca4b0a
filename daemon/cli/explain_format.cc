#include "daemon/cli/explain_format.h"

#include <cstdio>
#include <map>
#include <sstream>
#include <string_view>

#include "common/units.h"

namespace kvtier::cli {
namespace {

using nlohmann::json;

json ValueToJson(std::string_view name, const resp::Reply& value);

// A map, or RESP2's flat array of names and values.
json PairsToJson(const resp::Reply& reply) {
  json out = json::object();
  for (size_t i = 0; i + 1 < reply.elements.size(); i += 2) {
    const std::string& name = reply.elements[i].str;
    out[name] = ValueToJson(name, reply.elements[i + 1]);
  }
  return out;
}

json ValueToJson(std::string_view name, const resp::Reply& value) {
  switch (value.type) {
    case resp::ReplyType::kInteger:
      // RESP2 sends a boolean as an integer.
      if (name == "registered") return value.integer != 0;
      return value.integer;
    case resp::ReplyType::kBoolean:
      return value.integer != 0;
    case resp::ReplyType::kArray:
    case resp::ReplyType::kMap: {
      if (value.type == resp::ReplyType::kMap) return PairsToJson(value);
      json items = json::array();
      for (const resp::Reply& e : value.elements) items.push_back(PairsToJson(e));
      return items;
    }
    case resp::ReplyType::kNull:
      return nullptr;
    default:
      return value.str;
  }
}

std::string Str(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

uint64_t Num(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_number_integer() ? it->get<uint64_t>() : 0;
}

std::string Seconds(uint64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(us) / 1e6);
  return buf;
}

std::string Words(std::string text) {
  for (char& c : text) c = c == '_' ? ' ' : c;
  return text;
}

// The WHY column of a missing block.
std::string Why(const json& block, uint64_t log_entries) {
  const std::string reason = Str(block, "reason");
  std::ostringstream why;
  if (reason == "never_stored") {
    why << "never stored (nothing in the log of the last " << log_entries << " departures)";
  } else if (reason == "other_namespace") {
    why << "not stored under this namespace";
  } else {
    why << Words(reason) << " " << Seconds(Num(block, "age_us")) << " ago";
  }
  if (reason == "evicted") {
    const uint64_t used = Num(block, "tier_used_bytes"),
                   capacity = Num(block, "tier_capacity_bytes");
    why << " by " << Str(block, "policy") << ", " << Words(Str(block, "cause")) << ", tier "
        << (capacity == 0 ? 0 : 100 * used / capacity) << "% full (" << FormatBytes(used) << " of "
        << FormatBytes(capacity) << ")";
  } else if (reason == "corrupt") {
    why << " (checksum mismatch)";
  }
  if (auto it = block.find("elsewhere"); it != block.end() && it->is_array()) {
    for (const json& e : *it) {
      why << "; held where " << Str(e, "field") << "=" << Str(e, "value") << " (" << Str(e, "tier")
          << ", ns " << (e.contains("ns") ? Str(e, "ns") : Str(e, "ref")).substr(0, 16) << ")";
    }
  }
  return why.str();
}

}  // namespace

json ExplainToJson(const resp::Reply& reply) { return PairsToJson(reply); }

std::string FormatExplainTable(const json& explained) {
  std::ostringstream out;
  const uint64_t log_entries = Num(explained, "log_entries");
  out << "namespace " << Str(explained, "ns")
      << (explained.value("registered", false) ? " (registered)" : " (not registered)")
      << ", eviction policy " << Str(explained, "policy") << ", departure log "
      << Num(explained, "log_recorded") << " recorded, holds " << log_entries << "\n";
  out << "BLOCK  KEY               STATE    TIER    WHY\n";
  std::map<std::string, size_t> reasons;
  size_t index = 0, present = 0;
  const json blocks = explained.value("blocks", json::array());
  for (const json& block : blocks) {
    const std::string state = Str(block, "state");
    const std::string tier = Str(block, "tier");
    char line[96];
    std::snprintf(line, sizeof(line), "%5zu  %-16.16s  %-7s  ", index++, Str(block, "key").c_str(),
                  state.c_str());
    out << line;
    if (state == "missing") {
      ++reasons[Str(block, "reason")];
      std::snprintf(line, sizeof(line), "%-6s  ", tier.empty() ? "-" : tier.c_str());
      out << line << Why(block, log_entries);
    } else {
      present += state == "present";
      out << tier;
    }
    out << "\n";
  }
  out << blocks.size() << " blocks: " << present << " present";
  const char* sep = ", missing: ";
  for (const auto& [reason, n] : reasons) {
    out << sep << n << " " << Words(reason);
    sep = ", ";
  }
  out << "\n";
  return out.str();
}

}  // namespace kvtier::cli
