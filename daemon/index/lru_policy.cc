#include "daemon/index/lru_policy.h"

#include <bit>

namespace kvtier::index {

// Fibonacci hashing of Key128Hash: table positions come from the product's high bits, which
// depend on every bit of the key, so small test keys ({0, n}) spread as well as real ones.
uint64_t LruPolicy::HashOf(const BlockKey& key) {
  return Key128Hash()(key) * 0x9E3779B97F4A7C15ULL;
}

uint32_t LruPolicy::FindSlot(const BlockKey& key) const {
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

// Backward-shift deletion: later slots of the probe run move up into the hole, so lookups never
// meet a tombstone and the table needs no periodic cleaning.
void LruPolicy::EraseSlot(uint32_t slot) {
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

void LruPolicy::Grow() {
  const size_t capacity = slots_.empty() ? 16 : slots_.size() * 2;
  slots_.assign(capacity, Slot{});
  shift_ = 64 - std::countr_zero(capacity);
  const size_t mask = capacity - 1;
  for (uint32_t n = head_; n != kNone; n = nodes_[n].next) {
    const uint64_t hash = HashOf(nodes_[n].key);
    size_t i = Home(hash);
    while (slots_[i].node != kNone) i = (i + 1) & mask;
    slots_[i] = Slot{n, static_cast<uint32_t>(hash)};
  }
}

void LruPolicy::Unlink(uint32_t node) {
  const Node& n = nodes_[node];
  (n.prev == kNone ? head_ : nodes_[n.prev].next) = n.next;
  (n.next == kNone ? tail_ : nodes_[n.next].prev) = n.prev;
}

void LruPolicy::PushFront(uint32_t node) {
  nodes_[node].prev = kNone;
  nodes_[node].next = head_;
  (head_ == kNone ? tail_ : nodes_[head_].prev) = node;
  head_ = node;
}

void LruPolicy::Insert(const BlockKey& key) {
  if (const uint32_t slot = FindSlot(key); slot != kNone) {
    // Inserting a tracked key breaks the caller's contract; keep one node so size() stays exact.
    Touch(key);
    return;
  }
  if ((size_ + 1) * 4 > slots_.size() * 3) Grow();
  uint32_t node = free_;
  if (node != kNone) {
    free_ = nodes_[node].next;
  } else {
    node = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[node].key = key;
  PushFront(node);
  const uint64_t hash = HashOf(key);
  const size_t mask = slots_.size() - 1;
  size_t i = Home(hash);
  while (slots_[i].node != kNone) i = (i + 1) & mask;
  slots_[i] = Slot{node, static_cast<uint32_t>(hash)};
  ++size_;
}

void LruPolicy::Touch(const BlockKey& key) {
  const uint32_t slot = FindSlot(key);
  if (slot == kNone) return;
  const uint32_t node = slots_[slot].node;
  if (node == head_) return;
  Unlink(node);
  PushFront(node);
}

void LruPolicy::Erase(const BlockKey& key) {
  const uint32_t slot = FindSlot(key);
  if (slot == kNone) return;
  const uint32_t node = slots_[slot].node;
  EraseSlot(slot);
  Unlink(node);
  nodes_[node].next = free_;
  free_ = node;
  --size_;
}

std::optional<BlockKey> LruPolicy::PopVictim() {
  if (tail_ == kNone) return std::nullopt;
  BlockKey victim = nodes_[tail_].key;
  Erase(victim);
  return victim;
}

}  // namespace kvtier::index
