// `kvtier bench`: put and get throughput and latency against a running daemon.
//
//   kvtier bench [--block-bytes 1MiB] [--concurrency 1] [--path shm|inline] [--count 256]
//                [--batch 1] [--warmup 1] [--salt S] [--only put|get] [--json] [--keep]
//                [--url URL]
//
// Each of --concurrency threads opens its own Client (a Client is not thread-safe) and first puts
// --count blocks of --block-bytes, --batch blocks per call, then gets them back the same way;
// every call's latency is recorded. Before that, --warmup untimed rounds put, get and delete the
// same blocks: the first touch of each page of the arena in this process (a page fault) and the
// daemon's first use of each slab would otherwise be measured as part of the copies. Blocks go
// through the shared-memory arena (--path shm, Unix socket only) or inline in the RESP stream
// (--path inline). The run registers a fresh namespace (a random tenant salt), so it never collides
// with earlier runs, and drops it at the end unless
// --keep. --salt names the namespace instead, so that `--only put --keep` against one daemon and
// `--only get` against another (sharing a remote tier) read the same blocks; a run of one phase
// has no warm-up. `--only get` needs --salt (a random one would name blocks nobody put) and never
// drops the namespace: its blocks belong to the run that put them. Blocks the daemon refused (no
// room) or no longer has (evicted) are counted as failed, not treated as errors: they are what a
// too-small daemon does. A run the tool could not hold in memory (a block above 1 GiB, more than
// 2^27 blocks, more than 16 GiB of buffers) is refused before anything is connected or registered.
//
// Exit codes: 0 when the run completed; 1 when the flags describe a run too large to hold, the
// daemon could not be reached or a call failed outright (the message says which); CLI11's codes
// for bad flags.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>

#include "daemon/cli/client_flags.h"
#include "daemon/cli/command.h"

namespace kvtier::cli {

struct BenchFlags {
  ClientFlags client;
  std::string block_bytes = "1MiB";
  size_t concurrency = 1;
  std::string path = "shm";
  size_t count = 256;
  size_t batch = 1;
  size_t warmup = 1;
  std::string salt;  // empty: a random one
  std::string only;  // "put", "get", or empty: both
  bool json = false;
  bool keep = false;
};

Command AddBenchCommand(CLI::App& app);
int RunBench(const BenchFlags& flags, std::ostream& out, std::ostream& err);

}  // namespace kvtier::cli
