// KeySlots: the hash table of the index's containers that keep their keys in nodes of their own
// (SegmentedLists, BlockMap): it maps a BlockKey to a 32-bit node index and stores no key.
// Open addressing with linear probing over 8-byte slots (a node index and 32 bits of the key's
// hash), at most 3/4 full, and backward-shift deletion, so lookups never meet a tombstone. The
// tag spares reading the node of a slot that cannot match, and neighbouring slots share a cache
// line, so a lookup costs about one miss in the table and one in the node it finds: a
// std::unordered_map walks a bucket pointer, the node before the chain and the chain's nodes.
//
// Every method that reads keys takes `key_of`, a callable mapping a node index to the key stored
// in that node: the owner keeps the nodes, the table only their indices.
//
// Thread safety: none (its owner locks).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/keys.h"

namespace kvtier::index {

class KeySlots {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // The node holding `key`, or kNone.
  template <class KeyOf>
  uint32_t Find(const BlockKey& key, const KeyOf& key_of) const {
    const size_t slot = FindSlot(key, key_of);
    return slot == kNoSlot ? kNone : slots_[slot].node;
  }
  // Adds `node`, whose key is not in the table yet.
  template <class KeyOf>
  void Insert(uint32_t node, const KeyOf& key_of) {
    if ((count_ + 1) * 4 > slots_.size() * 3) Grow(key_of);
    Place(node, HashOf(key_of(node)));
    ++count_;
  }
  // Removes `key`; returns the node that held it, or kNone when absent.
  template <class KeyOf>
  uint32_t Erase(const BlockKey& key, const KeyOf& key_of) {
    return EraseIf(key, key_of, [](uint32_t) { return true; });
  }
  // Removes `key` if `pred(node)` holds for the node that holds it, with one probe; returns that
  // node, or kNone when absent or kept.
  template <class KeyOf, class Pred>
  uint32_t EraseIf(const BlockKey& key, const KeyOf& key_of, const Pred& pred) {
    const size_t slot = FindSlot(key, key_of);
    if (slot == kNoSlot || !pred(slots_[slot].node)) return kNone;
    const uint32_t node = slots_[slot].node;
    EraseSlot(slot, key_of);
    --count_;
    return node;
  }
  // The entry of `key` now lives in node `to` (its owner moved it there from `from`).
  void Renumber(const BlockKey& key, uint32_t from, uint32_t to) {
    const uint64_t hash = HashOf(key);
    const size_t mask = slots_.size() - 1;
    for (size_t i = Home(hash);; i = (i + 1) & mask) {
      if (slots_[i].node == from) {
        slots_[i].node = to;
        return;
      }
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr size_t kNoSlot = SIZE_MAX;
  struct Slot {
    uint32_t node = kNone;  // kNone: empty
    uint32_t tag = 0;       // the low half of the key's hash
  };
  // Fibonacci hashing of Key128Hash: positions come from the product's high bits, tags from its
  // low bits.
  static uint64_t HashOf(const BlockKey& key) { return Key128Hash()(key) * 0x9E3779B97F4A7C15ULL; }
  size_t Home(uint64_t hash) const { return static_cast<size_t>(hash >> shift_); }

  template <class KeyOf>
  size_t FindSlot(const BlockKey& key, const KeyOf& key_of) const {
    if (slots_.empty()) return kNoSlot;
    const uint64_t hash = HashOf(key);
    const auto tag = static_cast<uint32_t>(hash);
    const size_t mask = slots_.size() - 1;
    for (size_t i = Home(hash);; i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (slot.node == kNone) return kNoSlot;
      if (slot.tag == tag && key_of(slot.node) == key) return i;
    }
  }
  void Place(uint32_t node, uint64_t hash) {
    const size_t mask = slots_.size() - 1;
    size_t i = Home(hash);
    while (slots_[i].node != kNone) i = (i + 1) & mask;
    slots_[i] = Slot{node, static_cast<uint32_t>(hash)};
  }
  // Later slots of the probe run move up into the hole.
  template <class KeyOf>
  void EraseSlot(size_t slot, const KeyOf& key_of) {
    const size_t mask = slots_.size() - 1;
    size_t hole = slot;
    for (size_t i = (hole + 1) & mask; slots_[i].node != kNone; i = (i + 1) & mask) {
      const size_t home = Home(HashOf(key_of(slots_[i].node)));
      // Slot i may fill the hole only if its home is not inside (hole, i], cyclically.
      if (((i - home) & mask) >= ((i - hole) & mask)) {
        slots_[hole] = slots_[i];
        hole = i;
      }
    }
    slots_[hole] = Slot{};
  }
  template <class KeyOf>
  void Grow(const KeyOf& key_of) {
    const size_t capacity = slots_.empty() ? 16 : slots_.size() * 2;
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    shift_ = 64 - std::countr_zero(capacity);
    for (const Slot& slot : old) {
      if (slot.node != kNone) Place(slot.node, HashOf(key_of(slot.node)));
    }
  }

  std::vector<Slot> slots_;  // power-of-two size
  int shift_ = 64;           // 64 - log2(slots_.size())
  size_t count_ = 0;
};

}  // namespace kvtier::index
