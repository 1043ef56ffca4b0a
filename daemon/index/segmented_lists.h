// SegmentedLists: the bookkeeping that queue-based eviction policies share. Each tracked key sits
// in exactly one of `kSegments` recency lists (a window, a probation queue, a ghost queue, ...)
// and carries one small counter for the policy's own use (an access count, say).
//
// The lists link nodes by index inside one vector, with freed nodes reused, and a hash table maps
// each key to its node, so moving a key between lists allocates nothing and every operation is
// O(1). The table is LruPolicy's: open addressing with linear probing over 8-byte slots (a node
// index and a tag of the hash) and backward-shift deletion, at most 3/4 full. Per key that is a
// 32-byte node and 11 to 21 bytes of slots, where std::unordered_map took a 48-byte heap node
// and a bucket pointer besides the node: the difference keeps policies that remember evicted keys
// within the index's memory budget (index_bytes_per_block in bench/core_bench.cc). A
// header-only template because its users pick the number of lists.
//
// Thread safety: none (owned by one policy, which its owner locks).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/keys.h"

namespace kvtier::index {

template <size_t kSegments>
class SegmentedLists {
 public:
  using Node = uint32_t;
  static constexpr Node kNone = UINT32_MAX;

  // The node of `key`, or kNone.
  Node Find(const BlockKey& key) const {
    const uint32_t slot = FindSlot(key);
    return slot == kNone ? kNone : slots_[slot].node;
  }
  // Adds `key` (not tracked) at the head of `segment` with counter 0.
  Node Add(const BlockKey& key, size_t segment) {
    if ((tracked_ + 1) * 4 > slots_.size() * 3) Grow();
    Node node = free_;
    if (node != kNone) {
      free_ = nodes_[node].next;
    } else {
      node = static_cast<Node>(nodes_.size());
      nodes_.emplace_back();
    }
    nodes_[node].key = key;
    nodes_[node].counter = 0;
    Link(node, segment);
    Place(node);
    ++tracked_;
    return node;
  }
  // Moves `node` to the head of `segment` (its own included).
  void MoveToHead(Node node, size_t segment) {
    Unlink(node);
    Link(node, segment);
  }
  // Stops tracking `node`'s key.
  void Remove(Node node) {
    EraseSlot(FindSlot(nodes_[node].key));
    Unlink(node);
    nodes_[node].next = free_;
    free_ = node;
    --tracked_;
  }

  Node Tail(size_t segment) const { return lists_[segment].tail; }  // least recent; kNone if empty
  size_t Size(size_t segment) const { return lists_[segment].size; }
  const BlockKey& KeyOf(Node node) const { return nodes_[node].key; }
  size_t SegmentOf(Node node) const { return nodes_[node].segment; }
  uint8_t& Counter(Node node) { return nodes_[node].counter; }

 private:
  struct Entry {
    BlockKey key;
    Node prev;  // towards the head (most recent); kNone at the head
    Node next;  // towards the tail; kNone at the tail (or: next free node)
    uint8_t segment;
    uint8_t counter;
  };
  struct List {
    Node head = kNone;
    Node tail = kNone;
    size_t size = 0;
  };
  // `tag` (low bits of the key's hash) spares reading the node of a slot that cannot match.
  struct Slot {
    Node node = kNone;  // kNone: empty
    uint32_t tag = 0;
  };

  // Fibonacci hashing of Key128Hash: positions come from the product's high bits.
  static uint64_t HashOf(const BlockKey& key) { return Key128Hash()(key) * 0x9E3779B97F4A7C15ULL; }
  size_t Home(uint64_t hash) const { return static_cast<size_t>(hash >> shift_); }

  uint32_t FindSlot(const BlockKey& key) const {
    if (slots_.empty()) return kNone;
    const uint64_t hash = HashOf(key);
    const auto tag = static_cast<uint32_t>(hash);
    const size_t mask = slots_.size() - 1;
    for (size_t i = Home(hash);; i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (slot.node == kNone) return kNone;
      if (slot.tag == tag && nodes_[slot.node].key == key) return static_cast<uint32_t>(i);
    }
  }
  void Place(Node node) {
    const uint64_t hash = HashOf(nodes_[node].key);
    const size_t mask = slots_.size() - 1;
    size_t i = Home(hash);
    while (slots_[i].node != kNone) i = (i + 1) & mask;
    slots_[i] = Slot{node, static_cast<uint32_t>(hash)};
  }
  // Backward-shift deletion: later slots of the probe run move up into the hole, so lookups never
  // meet a tombstone.
  void EraseSlot(uint32_t slot) {
    const size_t mask = slots_.size() - 1;
    size_t hole = slot;
    for (size_t i = (hole + 1) & mask; slots_[i].node != kNone; i = (i + 1) & mask) {
      const size_t home = Home(HashOf(nodes_[slots_[i].node].key));
      // Slot i may fill the hole only if its home is not inside (hole, i], cyclically.
      if (((i - home) & mask) >= ((i - hole) & mask)) {
        slots_[hole] = slots_[i];
        hole = i;
      }
    }
    slots_[hole] = Slot{};
  }
  void Grow() {
    const size_t capacity = slots_.empty() ? 16 : slots_.size() * 2;
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    shift_ = 64 - std::countr_zero(capacity);
    for (const Slot& slot : old) {
      if (slot.node != kNone) Place(slot.node);
    }
  }

  void Unlink(Node node) {
    const Entry& e = nodes_[node];
    List& list = lists_[e.segment];
    (e.prev == kNone ? list.head : nodes_[e.prev].next) = e.next;
    (e.next == kNone ? list.tail : nodes_[e.next].prev) = e.prev;
    --list.size;
  }
  void Link(Node node, size_t segment) {
    List& list = lists_[segment];
    Entry& e = nodes_[node];
    e.segment = static_cast<uint8_t>(segment);
    e.prev = kNone;
    e.next = list.head;
    (list.head == kNone ? list.tail : nodes_[list.head].prev) = node;
    list.head = node;
    ++list.size;
  }

  std::vector<Entry> nodes_;
  Node free_ = kNone;
  std::array<List, kSegments> lists_;
  std::vector<Slot> slots_;  // power-of-two size, at most 3/4 full
  int shift_ = 64;           // 64 - log2(slots_.size())
  size_t tracked_ = 0;
};

}  // namespace kvtier::index
