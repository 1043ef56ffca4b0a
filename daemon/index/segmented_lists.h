// SegmentedLists: the bookkeeping that queue-based eviction policies share. Each tracked key sits
// in exactly one of `kSegments` recency lists (a window, a probation queue, a ghost queue, ...)
// and carries a 2-bit counter for the policy's own use (an access count, say). At most four
// lists, and at most 2^30 - 1 keys (resident and remembered together).
//
// The lists link nodes by index inside one vector, with freed nodes reused, and a hash table maps
// each key to its node, so moving a key between lists allocates nothing and every operation is
// O(1). The table is a KeySlots (open addressing over 8-byte slots, at most 3/4 full). A node
// is 24 bytes: the key, and two 32-bit words that each hold a 30-bit link under 2 bits of the
// segment or the counter (separate fields would pad it to 32). Per key that is 24 bytes and 11 to
// 21 bytes of slots, where std::unordered_map took a 48-byte heap node and a bucket pointer besides
// a node: the difference keeps policies that remember evicted keys within the index's memory budget
// (index_bytes_per_block in bench/core_bench.cc). A header-only template because its users pick the
// number of lists.
//
// Thread safety: none (owned by one policy, which its owner locks).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/keys.h"
#include "daemon/index/key_slots.h"

namespace kvtier::index {

template <size_t kSegments>
class SegmentedLists {
  static_assert(kSegments <= 4, "the segment lives in 2 bits");

 public:
  using Node = uint32_t;
  static constexpr Node kNone = UINT32_MAX;

  // The node of `key`, or kNone.
  Node Find(const BlockKey& key) const { return slots_.Find(key, KeyOfNode()); }
  // Adds `key` (not tracked) at the head of `segment` with counter 0.
  Node Add(const BlockKey& key, size_t segment) {
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
    slots_.Insert(node, KeyOfNode());
    return node;
  }
  // Moves `node` to the head of `segment` (its own included).
  void MoveToHead(Node node, size_t segment) {
    Unlink(node);
    Link(node, segment);
  }

  // The node of each of `keys` that sits in `segment`, or kNone, into `nodes`. Keys used together
  // stay linked in the order of their last use (MoveRunToHead), so each key after a found one is
  // looked for first in that one's successor: a run used together before costs one probe of the
  // table, not one per key (half of a long lookup's time in the policy went to those probes).
  void FindRun(std::span<const BlockKey> keys, size_t segment, std::vector<Node>& nodes) const {
    nodes.resize(keys.size());
    Node previous = kNone;
    for (size_t i = 0; i < keys.size(); ++i) {
      Node node = previous == kNone ? kNone : Next(previous);
      if (node == kNone || nodes_[node].key != keys[i]) node = Find(keys[i]);
      if (node != kNone && SegmentOf(node) != segment) node = kNone;
      nodes[i] = previous = node;
    }
  }
  // The same as MoveToHead(nodes[i], segment) for i from the last to the first, skipping kNone:
  // nodes[0] ends at the head, followed by nodes[1] and so on. Every node given is in `segment`.
  // A stretch of `nodes` that is already linked in that order moves as one splice.
  void MoveRunToHead(std::span<const Node> nodes, size_t segment) {
    for (size_t end = nodes.size(); end > 0;) {
      const Node last = nodes[end - 1];
      if (last == kNone) {
        --end;
        continue;
      }
      // The stretch ending at `last` that is linked in order now (earlier splices included: a
      // splice is the same as moving its nodes one by one, so the list is what those moves make).
      size_t begin = end - 1;
      while (begin > 0 && nodes[begin - 1] != kNone && Next(nodes[begin - 1]) == nodes[begin]) {
        --begin;
      }
      SpliceToHead(nodes[begin], last, segment);
      end = begin;
    }
  }
  // Stops tracking `node`'s key.
  void Remove(Node node) {
    slots_.Erase(nodes_[node].key, KeyOfNode());
    Unlink(node);
    nodes_[node].next_word = Encode(free_, 0);
    free_ = node;
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
  // The key of a node, for the table.
  auto KeyOfNode() const {
    return [this](uint32_t node) -> const BlockKey& { return nodes_[node].key; };
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
  // Moves the nodes from `first` to `last`, linked in that order in `segment`, to its head.
  void SpliceToHead(Node first, Node last, size_t segment) {
    List& list = lists_[segment];
    const Node prev = Prev(first);
    if (prev == kNone) return;  // already the head
    const Node next = Next(last);
    SetNext(prev, next);
    if (next == kNone) {
      list.tail = prev;
    } else {
      SetPrev(next, prev);
    }
    SetPrev(first, kNone);
    SetNext(last, list.head);
    SetPrev(list.head, last);
    list.head = first;
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
  KeySlots slots_;
};

}  // namespace kvtier::index
