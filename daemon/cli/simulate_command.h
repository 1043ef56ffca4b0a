// `kvtier simulate TRACE --capacity-blocks N [--policy P] [--block-tokens 512] [--json]`
//
// Replays a Mooncake-format trace (daemon/cli/trace_reader.h) through the block index and one
// eviction policy (daemon/cli/simulator.h) and prints the hit ratios a cache of N blocks would
// have had: a short table, or one JSON object with --json. No daemon is involved.
//
// Exit codes: 0 on success; 1 when the trace cannot be read or a line is malformed (the message
// names the file and line), or the simulation fails; CLI11's codes for bad flags.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "daemon/cli/command.h"

namespace kvtier::cli {

struct SimulateFlags {
  std::string trace_path;
  size_t capacity_blocks = 0;
  std::string policy = "lru";
  uint64_t block_tokens = 512;
  bool json = false;
};

// Registers `simulate` on `app`.
Command AddSimulateCommand(CLI::App& app);

// Runs the command with parsed flags, writing the report to `out` and errors to `err`; returns the
// exit code.
int RunSimulate(const SimulateFlags& flags, std::ostream& out, std::ostream& err);

}  // namespace kvtier::cli
