// `kvtier ping [--count N] [--url URL]`: checks that a daemon answers, and how fast.
//
// Prints one line per PING with its round-trip time. Exit codes: 0 when every PING was answered;
// 1 when the connection or a PING failed (the message names the URL and the reason); CLI11's codes
// for bad flags.
#pragma once

#include <cstdint>
#include <ostream>

#include "daemon/cli/client_flags.h"
#include "daemon/cli/command.h"

namespace kvtier::cli {

struct PingFlags {
  ClientFlags client;
  uint64_t count = 1;
};

Command AddPingCommand(CLI::App& app);
int RunPing(const PingFlags& flags, std::ostream& out, std::ostream& err);

}  // namespace kvtier::cli
