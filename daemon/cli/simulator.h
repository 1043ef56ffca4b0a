// Simulate: replays a request trace through the block index and an eviction policy, without
// payload bytes, to measure the hit ratio a cache of a given size would have had.
//
// Semantics, per request in trace order:
//   1. hits = the number of leading blocks present on arrival (a block is only useful together
//      with its whole prefix, so presence after the first miss does not count);
//   2. every block of the request is inserted, or touched when present, from the last block to
//      the first, so the prefix's head ends up the most recent (the order the store uses);
//   3. while the index holds more than `capacity_blocks`, the policy's victim is evicted.
// Evicting only after the whole request keeps a request from evicting its own prefix while it is
// being inserted; a request longer than the capacity keeps its head and loses its tail.
//
// It runs the production BlockIndex and EvictionPolicy code (one tier, no leases, no pins), so a
// policy measured here behaves the same way in the daemon. Pure function; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/cli/trace_reader.h"

namespace kvtier::cli {

struct SimulationOptions {
  size_t capacity_blocks = 0;  // must be at least 1
  std::string policy = "lru";  // see index::EvictionPolicyNames()
  // Tokens per trace block: converts block hits into token hits (the Mooncake traces use 512).
  uint64_t block_tokens = 512;
};

struct SimulationResult {
  uint64_t requests = 0;
  uint64_t total_blocks = 0;     // block references, summed over requests
  uint64_t hit_blocks = 0;       // leading blocks present on arrival, summed over requests
  uint64_t inserted_blocks = 0;  // block references that were absent and got inserted
  uint64_t evictions = 0;
  uint64_t input_tokens = 0;
  // Per request min(hits * block_tokens, input_tokens): the last block may be partial.
  uint64_t hit_tokens = 0;

  double block_hit_ratio() const;  // 0 when the trace has no blocks
  double token_hit_ratio() const;  // 0 when the trace has no input tokens
};

// kInvalidArgument for a zero capacity, zero block_tokens or an unknown policy name; kInternal if
// the index refuses an insert or finds no victim while over capacity (a bug in the index).
Result<SimulationResult> Simulate(const std::vector<TraceRequest>& requests,
                                  const SimulationOptions& options);

}  // namespace kvtier::cli
