// Renders the daemon's statistics document (KVT.STATS, the JSON of daemon/metrics/stats_format.h)
// as the tables `kvtier stats` prints: one row per tier (used / capacity, blocks, evictions), one
// row per namespace (lookups, hit ratio overall and by tier, evictions), the latency percentiles
// of requests (by op, path and tier) and of moves between tiers, then the totals.
//
// Fields the daemon does not send are shown as "-", so an older or newer daemon still prints.
// A pure function; any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier::cli {

// The tables for `stats_json`. Errors: kInvalidArgument when it is not a JSON object.
Result<std::string> FormatStatsTable(std::string_view stats_json);

}  // namespace kvtier::cli
