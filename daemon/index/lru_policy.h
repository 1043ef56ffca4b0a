// LruPolicy: evicts the least recently used block.
//
// One recency list of SegmentedLists (segmented_lists.h): the list nodes live in one vector and
// link by index, and a hash table with open addressing maps each key to its node, so Insert,
// Touch, Erase and PopVictim are O(1) and allocate nothing once the arrays have grown. A Touch
// costs one slot line, the node and its two neighbours, instead of a bucket, a map node and a list
// node reached one after another (each a cache miss on a large index, and each allocated on its
// own). These arrays are what "LRU links" costs per block (index_bytes_per_block in bench/).
#pragma once

#include <span>
#include <vector>

#include "daemon/index/eviction_policy.h"
#include "daemon/index/segmented_lists.h"

namespace kvtier::index {

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  void Insert(const BlockKey& key) override;
  // LRU learns nothing from a use: an Insert, unless the key is tracked (then nothing moves).
  void PutBack(const BlockKey& key) override {
    if (!Contains(key)) Insert(key);
  }
  void Touch(const BlockKey& key) override;
  // The run's nodes found and moved together (SegmentedLists::FindRun, MoveRunToHead).
  void TouchRun(std::span<const BlockKey> run) override;
  void Refresh(const BlockKey& key) override { Touch(key); }  // LRU learns nothing from a use
  void Erase(const BlockKey& key) override;
  std::optional<BlockKey> PopVictim() override;
  bool Contains(const BlockKey& key) const override { return lists_.Find(key) != Lists::kNone; }
  size_t size() const override { return lists_.Size(kRecency); }

 private:
  using Lists = SegmentedLists<1>;
  static constexpr size_t kRecency = 0;

  Lists lists_;
  std::vector<Lists::Node> run_nodes_;  // TouchRun's, kept between calls
};

}  // namespace kvtier::index
