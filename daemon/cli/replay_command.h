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
// --block-bytes is at most 1 GiB (daemon/cli/block_bytes_flag.h); --speed is 0 or at least
// kMinReplaySpeed.
//
// Exit codes: 0; 1 for a --block-bytes or --speed out of range, when the trace cannot be read, the
// daemon cannot be reached, a call fails, or any block came back with the wrong bytes; CLI11's
// codes for bad flags.
#pragma once

#include <chrono>
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
  uint64_t hold_ms = 0;     // ReplayOptions::hold
  bool json = false;
  double progress_interval_s = 2.0;
};

// The slowest --speed: a millionth of the trace's pace, a trace millisecond every quarter hour.
// Anything slower is a typo, and near 0 the offsets leave every integer clock.
inline constexpr double kMinReplaySpeed = 1e-6;

Command AddReplayCommand(CLI::App& app);
int RunReplay(const ReplayFlags& flags, std::ostream& out, std::ostream& err);

// When the request at `timestamp_ms` is due with --speed `speed` (> 0), counted from the first
// request's `first_ms`: 0 for a timestamp before it, at most kMaxReplayOffset (31 years) however
// large the gap, so that the deadline never overflows the clock's int64 nanoseconds.
inline constexpr std::chrono::microseconds kMaxReplayOffset{int64_t{1'000'000'000'000'000}};
std::chrono::microseconds ReplayOffset(uint64_t timestamp_ms, uint64_t first_ms, double speed);

}  // namespace kvtier::cli
