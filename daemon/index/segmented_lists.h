// SegmentedLists: the bookkeeping that queue-based eviction policies share. Each tracked key sits
// in exactly one of `kSegments` recency lists (a window, a probation queue, a ghost queue, ...)
// and carries one small counter for the policy's own use (an access count, say).
//
// The lists link nodes by index inside one vector, with freed nodes reused, and a hash table maps
// each key to its node, so moving a key between lists allocates nothing and every operation is
// O(1). A header-only template because its users pick the number of lists.
//
// Thread safety: none (owned by one policy, which its owner locks).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
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
    auto it = nodes_of_.find(key);
    return it == nodes_of_.end() ? kNone : it->second;
  }
  // Adds `key` (not tracked) at the head of `segment` with counter 0.
  Node Add(const BlockKey& key, size_t segment) {
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
    nodes_of_.emplace(key, node);
    return node;
  }
  // Moves `node` to the head of `segment` (its own included).
  void MoveToHead(Node node, size_t segment) {
    Unlink(node);
    Link(node, segment);
  }
  // Stops tracking `node`'s key.
  void Remove(Node node) {
    Unlink(node);
    nodes_of_.erase(nodes_[node].key);
    nodes_[node].next = free_;
    free_ = node;
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
  std::unordered_map<BlockKey, Node, Key128Hash> nodes_of_;
};

}  // namespace kvtier::index
