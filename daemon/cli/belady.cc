#include "daemon/cli/belady.h"

#include <cstdint>
#include <queue>
#include <unordered_map>

namespace kvtier::cli {
namespace {

constexpr uint32_t kNever = UINT32_MAX;  // a next use past the end of the trace

// The trace with its ids replaced by dense indices, and for every block reference the next
// request after its own that uses the same block. 32-bit fields: four bytes per reference instead
// of eight, on traces of tens of millions of references.
struct DenseTrace {
  std::vector<uint32_t> blocks;    // per reference, in request order
  std::vector<size_t> begin;       // per request: its first reference; one more at the end
  std::vector<uint32_t> next_use;  // per reference: a request index, or kNever
  uint32_t distinct = 0;
};

Result<DenseTrace> Densify(const std::vector<TraceRequest>& requests) {
  if (requests.size() >= kNever) return InvalidArgument("belady: too many requests");
  DenseTrace t;
  std::unordered_map<uint64_t, uint32_t> dense;
  t.begin.reserve(requests.size() + 1);
  for (const TraceRequest& request : requests) {
    t.begin.push_back(t.blocks.size());
    for (uint64_t id : request.hash_ids) {
      auto [it, added] = dense.try_emplace(id, t.distinct);
      if (added && ++t.distinct == kNever) return InvalidArgument("belady: too many blocks");
      t.blocks.push_back(it->second);
    }
  }
  t.begin.push_back(t.blocks.size());
  return t;
}

// One backward pass: `last[b]` is the earliest request after the current one that uses b.
void FillNextUses(DenseTrace& t) {
  std::vector<uint32_t> last(t.distinct, kNever);
  t.next_use.resize(t.blocks.size());
  for (size_t r = t.begin.size() - 1; r-- > 0;) {
    for (size_t i = t.begin[r]; i < t.begin[r + 1]; ++i) t.next_use[i] = last[t.blocks[i]];
    for (size_t i = t.begin[r]; i < t.begin[r + 1]; ++i)
      last[t.blocks[i]] = static_cast<uint32_t>(r);
  }
}

// Eviction candidates, the greatest first. A block has one current entry, the one pushed at its
// latest reference; older entries are skipped when popped (lazy deletion), recognised by a next
// use that is no longer the block's: a block's next uses only grow.
struct Candidate {
  uint32_t next_use;
  uint32_t depth;
  uint32_t block;
  bool operator<(const Candidate& o) const {
    if (next_use != o.next_use) return next_use < o.next_use;
    if (depth != o.depth) return depth < o.depth;
    return block < o.block;
  }
};

class BeladyCache {
 public:
  BeladyCache(const DenseTrace& trace, const SimulationOptions& options)
      : trace_(trace),
        capacity_(options.capacity_blocks),
        present_(trace.distinct, 0),
        next_use_(trace.distinct, kNever),
        seen_in_(trace.distinct, kNever) {}

  // Runs request r: returns its prefix hits; adds to the block-present count and the counters.
  uint64_t Run(uint32_t r, SimulationResult& result);
  uint64_t present_refs() const { return present_refs_; }
  bool repeated_ids() const { return repeated_ids_; }

 private:
  void EvictToCapacity(SimulationResult& result);

  const DenseTrace& trace_;
  const size_t capacity_;
  std::vector<uint8_t> present_;
  std::vector<uint32_t> next_use_;  // of a present block, from its latest reference
  std::vector<uint32_t> seen_in_;   // the latest request that referenced each block
  std::priority_queue<Candidate> candidates_;
  size_t size_ = 0;
  uint64_t present_refs_ = 0;
  bool repeated_ids_ = false;
};

uint64_t BeladyCache::Run(uint32_t r, SimulationResult& result) {
  const size_t begin = trace_.begin[r];
  const size_t end = trace_.begin[r + 1];
  size_t hits = begin;
  while (hits < end && present_[trace_.blocks[hits]]) ++hits;
  for (size_t i = begin; i < end; ++i) {
    const uint32_t b = trace_.blocks[i];
    repeated_ids_ |= seen_in_[b] == r;
    seen_in_[b] = r;
    if (present_[b]) {
      ++present_refs_;
    } else {
      present_[b] = 1;
      ++size_;
      ++result.inserted_blocks;
    }
    next_use_[b] = trace_.next_use[i];
    candidates_.push({trace_.next_use[i], static_cast<uint32_t>(i - begin), b});
  }
  EvictToCapacity(result);
  return hits - begin;
}

void BeladyCache::EvictToCapacity(SimulationResult& result) {
  while (size_ > capacity_) {
    const Candidate top = candidates_.top();
    candidates_.pop();
    if (!present_[top.block] || next_use_[top.block] != top.next_use) continue;  // stale
    present_[top.block] = 0;
    --size_;
    ++result.evictions;
  }
}

}  // namespace

Result<SimulationResult> SimulateBelady(const std::vector<TraceRequest>& requests,
                                        const SimulationOptions& options) {
  KVTIER_RETURN_IF_ERROR(ValidateSimulationOptions(options));
  KVTIER_ASSIGN_OR_RETURN(DenseTrace trace, Densify(requests));
  FillNextUses(trace);
  BeladyCache cache(trace, options);
  SimulationResult result;
  for (size_t r = 0; r < requests.size(); ++r) {
    const uint64_t hits = cache.Run(static_cast<uint32_t>(r), result);
    result.Count(requests[r], hits, options);
  }
  if (!cache.repeated_ids()) result.upper_bound_hit_blocks = cache.present_refs();
  return result;
}

}  // namespace kvtier::cli
