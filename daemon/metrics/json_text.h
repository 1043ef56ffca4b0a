// JsonText: how every JSON document of daemon/metrics (/stats, KVT.STATS, /stats/history) becomes
// text. Internal to daemon/metrics.
//
// nlohmann::json::dump() throws on a string that is not valid UTF-8, and a namespace label is
// text a client once chose: KVT.REGISTER refuses such names now, but an NVMe catalog written
// before that check still hands them back at start-up. One bad label must not take the statistics
// down for everyone, so invalid bytes are written as U+FFFD instead.
//
// A pure function; safe from any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvtier::metrics {

inline std::string JsonText(const nlohmann::json& doc) {
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvtier::metrics
