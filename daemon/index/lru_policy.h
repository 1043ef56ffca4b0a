// LruPolicy: evicts the least recently used block.
//
// A doubly linked list in recency order plus a hash table from key to list node: Insert, Touch,
// Erase and PopVictim are O(1). Both are flat arrays rather than node-based containers: the list
// nodes live in one vector and link by index, and the table is open addressing with linear probing
// over 8-byte slots. A Touch then costs one slot line, the node and its two neighbours, instead of
// a bucket, a map node and a list node reached one after another (each a cache miss on a large
// index, and each allocated on its own). These arrays are what "LRU links" costs per block (see
// index_bytes_per_block in bench/).
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/index/eviction_policy.h"

namespace kvtier::index {

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  void Insert(const BlockKey& key) override;
  void Touch(const BlockKey& key) override;
  void Erase(const BlockKey& key) override;
  std::optional<BlockKey> PopVictim() override;
  bool Contains(const BlockKey& key) const override { return FindSlot(key) != kNone; }
  size_t size() const override { return size_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  struct Node {
    BlockKey key;
    uint32_t prev;  // towards the most recent; kNone at the head
    uint32_t next;  // towards the least recent; kNone at the tail (or: next free node)
  };
  // `tag` (high bits of the key's hash) spares reading the node of a slot that cannot match.
  struct Slot {
    uint32_t node = kNone;  // kNone: empty
    uint32_t tag = 0;
  };

  static uint64_t HashOf(const BlockKey& key);
  size_t Home(uint64_t hash) const { return static_cast<size_t>(hash >> shift_); }
  uint32_t FindSlot(const BlockKey& key) const;
  void EraseSlot(uint32_t slot);
  void Grow();
  void Unlink(uint32_t node);
  void PushFront(uint32_t node);

  std::vector<Node> nodes_;  // indexed by Slot::node; unused nodes chained from free_
  std::vector<Slot> slots_;  // power-of-two size, at most 3/4 full
  int shift_ = 64;           // 64 - log2(slots_.size())
  uint32_t head_ = kNone;    // most recently used
  uint32_t tail_ = kNone;    // least recently used
  uint32_t free_ = kNone;
  size_t size_ = 0;
};

}  // namespace kvtier::index
