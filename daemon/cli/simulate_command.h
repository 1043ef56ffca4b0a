// `kvtier simulate TRACE --capacity-blocks N [--policy P] [--block-tokens 512] [--metric M]
//                 [--cost-linear A] [--cost-quadratic B] [--json]`
//
// Replays a Mooncake-format trace (daemon/cli/trace_reader.h) through one eviction policy or the
// offline optimum (daemon/cli/simulator.h, belady.h) and prints the hit ratios a cache of N blocks
// would have had, led by the chosen metric (block hits, token hits or saved prefill cost), and
// the rate of the run: a short table, or one JSON object with --json. No daemon is involved.
// Online policies stream the trace line by line; belady reads it whole first.
//
// Exit codes: 0 on success; 1 when the trace cannot be read or a line is malformed (the message
// names the file and line), or the simulation fails (the cost model overflowing a double
// included); CLI11's codes for bad flags.
#pragma once

#include <ostream>
#include <string>

#include "daemon/cli/command.h"
#include "daemon/cli/simulator.h"

namespace kvtier::cli {

struct SimulateFlags {
  std::string trace_path;
  SimulationOptions options;     // --capacity-blocks, --policy, --block-tokens, --cost-*
  std::string metric = "block";  // see MetricNames()
  bool json = false;
};

// Registers `simulate` on `app`.
Command AddSimulateCommand(CLI::App& app);

// Runs the command with parsed flags, writing the report to `out` and errors to `err`; returns the
// exit code.
int RunSimulate(const SimulateFlags& flags, std::ostream& out, std::ostream& err);

}  // namespace kvtier::cli
