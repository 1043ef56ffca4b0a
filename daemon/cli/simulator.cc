#include "daemon/cli/simulator.h"

#include <algorithm>
#include <memory>
#include <span>

#include "daemon/index/block_index.h"

namespace kvtier::cli {
namespace {

// Trace ids are small sequential integers. The index picks a shard from a key's high half, so the
// high half gets a mixed copy of the id (splitmix64's finaliser) while the low half keeps the id
// itself, which keeps the mapping one-to-one.
BlockKey KeyOfTraceId(uint64_t id) {
  uint64_t z = id + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return BlockKey{{z, id}};
}

// Step 2 of the header's semantics. Returns how many blocks were inserted.
Result<uint64_t> InsertOrTouchTailFirst(index::BlockIndex& index, std::span<const BlockKey> keys) {
  index::BlockMeta meta;
  meta.tier = TierId::kHost;
  uint64_t inserted = 0;
  for (size_t i = keys.size(); i-- > 0;) {
    // A one-key Lookup touches exactly that block; a multi-key Lookup would touch the whole
    // present prefix, which is not the per-block order the semantics ask for.
    if (index.Lookup(keys.subspan(i, 1), /*touch=*/true).ready_prefix == 1) continue;
    Status st = index.InsertReady(keys[i], meta);
    if (!st.ok()) return Internal("simulator insert failed: " + st.ToString());
    ++inserted;
  }
  return inserted;
}

// Step 3. Returns how many blocks were evicted.
Result<uint64_t> EvictToCapacity(index::BlockIndex& index, size_t capacity_blocks) {
  uint64_t evicted = 0;
  while (index.size() > capacity_blocks) {
    auto victim = index.PickVictim(TierId::kHost, /*now_us=*/0);
    if (!victim) return Internal("index over capacity but its policy names no victim");
    index.Erase(victim->first);
    ++evicted;
  }
  return evicted;
}

}  // namespace

double SimulationResult::block_hit_ratio() const {
  return total_blocks == 0 ? 0.0 : static_cast<double>(hit_blocks) / total_blocks;
}

double SimulationResult::token_hit_ratio() const {
  return input_tokens == 0 ? 0.0 : static_cast<double>(hit_tokens) / input_tokens;
}

Result<SimulationResult> Simulate(const std::vector<TraceRequest>& requests,
                                  const SimulationOptions& options) {
  if (options.capacity_blocks == 0) return InvalidArgument("capacity must be at least 1 block");
  if (options.block_tokens == 0) return InvalidArgument("block_tokens must be at least 1");
  index::BlockIndex::Options index_options;
  index_options.policy = options.policy;
  index_options.capacity_hint_blocks = options.capacity_blocks;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<index::BlockIndex> index,
                          index::BlockIndex::Create(index_options));

  SimulationResult result;
  std::vector<BlockKey> keys;
  for (const TraceRequest& request : requests) {
    keys.clear();
    for (uint64_t id : request.hash_ids) keys.push_back(KeyOfTraceId(id));
    const uint64_t hits = index->Lookup(keys, /*touch=*/false).ready_prefix;
    KVTIER_ASSIGN_OR_RETURN(uint64_t inserted, InsertOrTouchTailFirst(*index, keys));
    KVTIER_ASSIGN_OR_RETURN(uint64_t evicted, EvictToCapacity(*index, options.capacity_blocks));

    ++result.requests;
    result.total_blocks += keys.size();
    result.hit_blocks += hits;
    result.inserted_blocks += inserted;
    result.evictions += evicted;
    result.input_tokens += request.input_tokens;
    result.hit_tokens += std::min(hits * options.block_tokens, request.input_tokens);
  }
  return result;
}

}  // namespace kvtier::cli
