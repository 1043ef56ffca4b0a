// LruPolicy: evicts the least recently used block.
//
// A doubly linked list in recency order plus a hash map from key to list position: Insert, Touch,
// Erase and PopVictim are O(1). The list nodes are the only per-block allocation; they are what
// "LRU links" costs per block (see index_bytes_per_block in bench/).
#pragma once

#include <list>
#include <unordered_map>

#include "daemon/index/eviction_policy.h"

namespace kvtier::index {

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  void Insert(const BlockKey& key) override;
  void Touch(const BlockKey& key) override;
  void Erase(const BlockKey& key) override;
  std::optional<BlockKey> PopVictim() override;
  bool Contains(const BlockKey& key) const override { return positions_.contains(key); }
  size_t size() const override { return positions_.size(); }

 private:
  std::list<BlockKey> order_;  // front: most recently used
  std::unordered_map<BlockKey, std::list<BlockKey>::iterator, Key128Hash> positions_;
};

}  // namespace kvtier::index
