// `kvtier replay TRACE.jsonl --block-bytes B`: drives a running daemon with a Mooncake-format
// trace (daemon/cli/replayer.h) and reports what it saw.
//
//   kvtier replay TRACE --block-bytes 1MiB [--limit N] [--path shm|inline] [--block-tokens 512]
//                 [--salt S] [--speed X] [--json] [--url URL]
//
// Reports block and token hit ratios (the served prefix, by the tier Lookup named), blocks lost
// between Lookup and Get, corrupt blocks (served with the wrong bytes), puts, throughput
// (requests/s, get and put GiB/s) and latency percentiles per request and per phase. Progress
// goes to stderr every two seconds. The namespace's tenant salt is random unless --salt is given,
// so a run starts on a cold cache; pass the same --salt to replay against a warm one. The blocks
// stay in the daemon afterwards (see `kvtier stats`). Requests go as fast as the daemon answers,
// or, with --speed X, each at its trace timestamp divided by X (from the first request's), never
// before the previous one has finished: what several replays of parts of one trace need to
// interleave as the trace's clients did.
//
// --block-bytes is at most 1 GiB (daemon/cli/block_bytes_flag.h).
//
// Exit codes: 0; 1 for a --block-bytes out of range, when the trace cannot be read, the daemon
// cannot be reached, a call fails, or any block came back with the wrong bytes; CLI11's codes for
// bad flags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

#include "daemon/cli/client_flags.h"
#include "daemon/cli/command.h"

namespace kvtier::cli {

struct ReplayFlags {
  ClientFlags client;
  std::string trace_path;
  std::string block_bytes;
  size_t limit = 0;
  std::string path = "shm";
  uint64_t block_tokens = 512;
  std::string salt;
  double speed = 0;  // 0: as fast as possible; X: the trace's arrival times, X times faster
  bool no_refresh = false;  // ReplayOptions::refresh off
  bool json = false;
  double progress_interval_s = 2.0;
};

Command AddReplayCommand(CLI::App& app);
int RunReplay(const ReplayFlags& flags, std::ostream& out, std::ostream& err);

}  // namespace kvtier::cli
