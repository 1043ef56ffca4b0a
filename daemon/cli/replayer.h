// Replayer: drives a running daemon with the requests of a Mooncake-format trace, the way an
// engine with a KV-cache connector would, and checks every byte it gets back.
//
// Per request: the keys of its blocks (the trace's hash ids folded into chained keys under the
// namespace, so equal id prefixes give equal key prefixes), a Lookup, a Get of the cached prefix
// (through shared memory or inline), and a Put of every block after the prefix that was actually
// served. Each block's payload is derived from its hash id (FillTracePayload), so a Get can be
// verified: a block whose bytes differ counts as corrupt and ends the served prefix there. Blocks
// that Lookup reported but Get did not serve (evicted in between, unless the lookup held them:
// ReplayOptions::hold) count as lost.
//
// A Replayer borrows one Client (not thread-safe: one thread), and owns its buffers. Payloads move
// in calls of at most 256 MiB so memory stays bounded whatever the block size.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/keys.h"
#include "common/status.h"
#include "daemon/cli/latency.h"
#include "daemon/cli/trace_reader.h"

namespace kvtier::cli {

// The payload of the trace block named `hash_id`: a pseudo-random stream seeded by the id.
void FillTracePayload(uint64_t hash_id, std::span<std::byte> out);

// The chained keys of a request's blocks: hash ids as 8 little-endian bytes, folded under `ns`
// (hashing::FoldForeignKeys).
std::vector<BlockKey> TraceKeys(const NamespaceId& ns, std::span<const uint64_t> hash_ids);

// The namespace `kvtier replay` stores a trace's blocks under: a fixed descriptor (model
// "kvtier-replay", layout "mooncake-trace") with the trace's tokens per block and a tenant salt.
// `kvtier explain --trace` computes the same keys from the same --block-tokens and --salt.
hashing::NamespaceDescriptor TraceNamespace(uint64_t block_tokens, const std::string& salt);

struct ReplayOptions {
  uint64_t block_bytes = 0;
  bool shm = true;              // Put/Get through the arena; the client must be attached
  uint64_t block_tokens = 512;  // tokens per trace block, for the token hit ratio
  // After a request's puts, KVT.REFRESH of its chain, as the vLLM connector does: the puts left
  // its new blocks more recent than the prefix its lookup touched.
  bool refresh = true;
  // Above 0: each lookup holds the prefix it finds from eviction this long (KVT.LOOKUP ... HOLD),
  // as the vLLM connector does until it has loaded it. At 0 a block the lookup found may be
  // evicted before the get (counted in lost_blocks).
  std::chrono::milliseconds hold{0};
};

struct ReplayTotals {
  uint64_t requests = 0;
  uint64_t blocks = 0;                                // blocks asked for, all requests
  uint64_t lookup_hit_blocks = 0;                     // the prefixes Lookup reported
  uint64_t served_blocks = 0;                         // blocks fetched and verified
  std::array<uint64_t, kTierCount> served_by_tier{};  // by the tier Lookup reported
  uint64_t lost_blocks = 0;      // reported by Lookup, not served by Get (nor corrupt)
  uint64_t corrupt_blocks = 0;   // served with the wrong bytes
  uint64_t stored_blocks = 0;    // Put answered OK
  uint64_t existing_blocks = 0;  // Put answered "already stored"
  uint64_t failed_puts = 0;      // Put refused (busy, rejected, ...)
  uint64_t input_tokens = 0;
  uint64_t hit_tokens = 0;
  LatencyRecorder request_latency;
  LatencyRecorder lookup_latency;
  LatencyRecorder get_latency;  // requests with a prefix to fetch
  LatencyRecorder put_latency;  // requests with blocks to store

  double block_hit_ratio() const;  // served / blocks
};

class Replayer {
 public:
  Replayer(client::Client* client, NamespaceId ns, ReplayOptions options);

  // Replays one request. Errors are the client's (I/O, a malformed reply, a refused command):
  // the connection is then usually unusable and the replay should stop.
  Status Replay(const TraceRequest& request);

  const ReplayTotals& totals() const { return totals_; }

 private:
  // Lookup of one request's keys, held when options_.hold says so.
  Result<client::LookupResult> Lookup(std::span<const BlockKey> keys);
  // Gets and verifies keys[0, prefix); returns the blocks served intact.
  Result<size_t> FetchPrefix(std::span<const BlockKey> keys, std::span<const uint64_t> ids);
  Status StoreRest(std::span<const BlockKey> keys, std::span<const uint64_t> ids);
  // Blocks per call: as many as fit in 256 MiB, at least one.
  size_t ChunkBlocks() const;
  // Grows the buffer to hold `n` blocks; it grows with the longest request seen, not to 256 MiB.
  void ReserveBlocks(size_t n);

  client::Client* client_;
  NamespaceId ns_;
  ReplayOptions options_;
  ReplayTotals totals_;
  std::vector<std::byte> buffer_;    // up to ChunkBlocks() x block_bytes
  std::vector<std::byte> expected_;  // one block, for verification
};

}  // namespace kvtier::cli
