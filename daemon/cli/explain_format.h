// The KVT.EXPLAIN reply as JSON (for --json and for the table), and as the table people read.
// Pure functions, any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/resp/reply.h"

namespace kvtier::cli {

// The reply (a RESP3 map, or the flat name/value array RESP2 makes of one) as a JSON object of
// the same names: `blocks` an array of objects, each missing block's `elsewhere` too.
nlohmann::json ExplainToJson(const resp::Reply& reply);

// One line per block (index, key, state, tier, reason and its details), then a summary line.
std::string FormatExplainTable(const nlohmann::json& explained);

}  // namespace kvtier::cli
