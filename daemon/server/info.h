// INFO and KVT.STATS: the server's and the store's statistics, rendered through daemon/metrics so
// that INFO, KVT.STATS, HTTP /stats and `kvtier stats` show the same numbers.
//
// Handlers run on the calling connection's strand; they read the store's snapshot and the server's
// atomic counters.
#pragma once

#include <string>

#include "daemon/metrics/stats_format.h"
#include "daemon/server/commands.h"

namespace kvtier::server {

// INFO [section ...]: Redis' "# Section\r\nfield:value\r\n" text, sections server, clients,
// memory, stats, keyspace and kvtier; "all", "default", "everything" or no argument give all of
// them. Unknown sections are skipped, as Redis does.
Progress Info(CommandContext& ctx, resp::Command& cmd);

// KVT.STATS: the JSON document of metrics::StatsToJson as one bulk string; namespace ids in it
// only for an admin session (Session::admin), refs for everyone.
Progress KvtStats(CommandContext& ctx, resp::Command& cmd);

// The server's facts in the shape the metrics formatters take.
metrics::ProcessInfo MakeProcessInfo(const ServerContext& server);

}  // namespace kvtier::server
