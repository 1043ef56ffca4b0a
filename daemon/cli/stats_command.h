// `kvtier stats [--json] [--url URL]`: the daemon's statistics (KVT.STATS).
//
// By default prints tables (daemon/cli/stats_table.h); with --json, the daemon's JSON document as
// it came, for scripts. Exit codes: 0; 1 when the daemon cannot be reached or answers with an
// error or a document that is not JSON; CLI11's codes for bad flags.
#pragma once

#include <ostream>

#include "daemon/cli/client_flags.h"
#include "daemon/cli/command.h"

namespace kvtier::cli {

struct StatsFlags {
  ClientFlags client;
  bool json = false;
};

Command AddStatsCommand(CLI::App& app);
int RunStats(const StatsFlags& flags, std::ostream& out, std::ostream& err);

}  // namespace kvtier::cli
