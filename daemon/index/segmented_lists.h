// SegmentedLists: the bookkeeping that queue-based eviction policies share. Each tracked key sits
// in exactly one of `kSegments` recency lists (a window, a probation queue, a ghost queue, ...)
// and carries a 2-bit counter for the policy's own use (an access count, say). At most four
// lists, and at most 2^30 - 1 keys (resident and remembered together).
//
// The lists link nodes by index inside one vector, with freed nodes reused, and a hash table maps
// each key to its node, so moving a key between lists allocates nothing and every operation is
// O(1). The table is open addressing with linear probing over 8-byte slots (a node
// index and a tag of the hash) and backward-shift deletion, at most 3/4 full. A node is 24 bytes:
// the key, and two 32-bit words that each hold a 30-bit link under 2 bits of the segment or the
// counter (separate fields would pad it to 32). Per key that is 24 bytes and 11 to 21 bytes of
// slots, where std::unordered_map took a 48-byte heap node and a bucket pointer besides a node: the
// difference keeps policies that remember evicted keys within the index's memory budget
// (index_bytes_per_block in bench/core_bench.cc). A header-only template because its users pick the
// number of lists.
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
  static_assert(kSegments <= 4, "the segment lives in 2 bits");

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
      free_ = Next(node);
    } else {
      node = static_cast<Node>(nodes_.size());
      nodes_.emplace_back();
    }
    nodes_[node].key = key;
    nodes_[node].next_word = Encode(kNone, 0);  // counter 0
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
    nodes_[node].next_word = Encode(free_, 0);
    free_ = node;
    --tracked_;
  }

  Node Head(size_t segment) const { return lists_[segment].head; }  // most recent; kNone if empty
  Node Tail(size_t segment) const { return lists_[segment].tail; }  // least recent; kNone if empty
  size_t Size(size_t segment) const { return lists_[segment].size; }
  const BlockKey& KeyOf(Node node) const { return nodes_[node].key; }
  size_t SegmentOf(Node node) const { return nodes_[node].prev_word >> kIndexBits; }
  static constexpr uint8_t kMaxCounter = 3;
  uint8_t Counter(Node node) const { return nodes_[node].next_word >> kIndexBits; }
  // `value` at most kMaxCounter.
  void SetCounter(Node node, uint8_t value) {
    nodes_[node].next_word = Encode(Next(node), value & kMaxCounter);
  }

 private:
  // Each word: a 30-bit node index (all ones: none) under 2 bits of payload.
  struct Entry {
    BlockKey key;
    uint32_t prev_word;  // towards the head (most recent), under the segment
    uint32_t next_word;  // towards the tail (or: next free node), under the counter
  };
  static_assert(sizeof(Entry) == 24);
  static constexpr int kIndexBits = 30;
  static constexpr uint32_t kIndexMask = (uint32_t{1} << kIndexBits) - 1;

  static Node Decode(uint32_t word) {
    const uint32_t index = word & kIndexMask;
    return index == kIndexMask ? kNone : index;
  }
  static uint32_t Encode(Node node, uint32_t payload) {
    return (payload << kIndexBits) | (node == kNone ? kIndexMask : node);
  }
  Node Prev(Node node) const { return Decode(nodes_[node].prev_word); }
  Node Next(Node node) const { return Decode(nodes_[node].next_word); }
  void SetPrev(Node node, Node prev) {
    nodes_[node].prev_word = Encode(prev, nodes_[node].prev_word >> kIndexBits);
  }
  void SetNext(Node node, Node next) {
    nodes_[node].next_word = Encode(next, nodes_[node].next_word >> kIndexBits);
  }
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
    List& list = lists_[SegmentOf(node)];
    const Node prev = Prev(node);
    const Node next = Next(node);
    if (prev == kNone) {
      list.head = next;
    } else {
      SetNext(prev, next);
    }
    if (next == kNone) {
      list.tail = prev;
    } else {
      SetPrev(next, prev);
    }
    --list.size;
  }
  void Link(Node node, size_t segment) {
    List& list = lists_[segment];
    nodes_[node].prev_word = Encode(kNone, static_cast<uint32_t>(segment));
    SetNext(node, list.head);
    if (list.head == kNone) {
      list.tail = node;
    } else {
      SetPrev(list.head, node);
    }
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
