// BlockMap: one index shard's map from BlockKey to BlockMeta.
//
// Entries sit densely in fixed-size chunks (an erase moves the last entry into the hole, so a
// scan meets no gaps) and a KeySlots table finds them. A lookup costs about two cache misses, a
// slot and an entry, where std::unordered_map's bucket chains took three or more: they were half
// of an 8,192-key lookup's time (lookup_8192_keys_us_p50 in bench/core_bench.cc). Chunks, not
// one vector, so that growing never copies the entries nor holds twice their memory.
//
// A pointer to an entry's metadata stays valid until the next TryEmplace or Erase.
//
// Thread safety: none (the shard's mutex guards it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/keys.h"
#include "daemon/index/block_meta.h"
#include "daemon/index/key_slots.h"

namespace kvtier::index {

class BlockMap {
 public:
  BlockMeta* Find(const BlockKey& key) {
    const uint32_t at = slots_.Find(key, KeyAt());
    return at == KeySlots::kNone ? nullptr : &EntryAt(at).meta;
  }
  const BlockMeta* Find(const BlockKey& key) const {
    const uint32_t at = slots_.Find(key, KeyAt());
    return at == KeySlots::kNone ? nullptr : &EntryAt(at).meta;
  }
  // Adds `key` with `meta` unless it is present. Returns the entry's metadata and whether it was
  // added.
  std::pair<BlockMeta*, bool> TryEmplace(const BlockKey& key, const BlockMeta& meta);
  // Removes `key`; false when absent.
  bool Erase(const BlockKey& key) {
    return EraseIf(key, [](const BlockMeta&) { return true; }).has_value();
  }
  // Removes `key` if it is present and `pred(meta)` holds, finding it once; returns the metadata
  // it held.
  template <class Pred>
  std::optional<BlockMeta> EraseIf(const BlockKey& key, const Pred& pred) {
    const uint32_t at =
        slots_.EraseIf(key, KeyAt(), [&](uint32_t node) { return pred(EntryAt(node).meta); });
    if (at == KeySlots::kNone) return std::nullopt;
    const BlockMeta meta = EntryAt(at).meta;
    FillHole(at);
    return meta;
  }
  size_t size() const { return size_; }

  // Every entry, in no particular order: range-for over (key, meta) pairs, the key read-only (the
  // table finds entries by it). Adding or erasing while iterating is not allowed.
  template <class Map, class Meta>
  class Iterator {
   public:
    Iterator(Map* map, size_t at) : map_(map), at_(at) {}
    std::pair<const BlockKey&, Meta&> operator*() const {
      auto& entry = map_->EntryAt(static_cast<uint32_t>(at_));
      return {entry.key, entry.meta};
    }
    Iterator& operator++() {
      ++at_;
      return *this;
    }
    bool operator==(const Iterator&) const = default;

   private:
    Map* map_;
    size_t at_;
  };
  auto begin() { return Iterator<BlockMap, BlockMeta>(this, 0); }
  auto end() { return Iterator<BlockMap, BlockMeta>(this, size_); }
  auto begin() const { return Iterator<const BlockMap, const BlockMeta>(this, 0); }
  auto end() const { return Iterator<const BlockMap, const BlockMeta>(this, size_); }

 private:
  struct Entry {
    BlockKey key;
    BlockMeta meta;
  };

  // 64 entries of 112 bytes: a chunk's slack is small next to a shard of any real size.
  static constexpr size_t kChunkBits = 6;
  static constexpr size_t kChunkEntries = size_t{1} << kChunkBits;

  Entry& EntryAt(uint32_t at) { return chunks_[at >> kChunkBits][at & (kChunkEntries - 1)]; }
  const Entry& EntryAt(uint32_t at) const {
    return chunks_[at >> kChunkBits][at & (kChunkEntries - 1)];
  }
  // The key of an entry, for the table.
  struct KeyAtEntry {
    const BlockMap* map;
    const BlockKey& operator()(uint32_t at) const { return map->EntryAt(at).key; }
  };
  KeyAtEntry KeyAt() const { return KeyAtEntry{this}; }
  // Moves the last entry into `at`, whose key the table no longer holds.
  void FillHole(uint32_t at);

  std::vector<std::unique_ptr<Entry[]>> chunks_;
  size_t size_ = 0;
  KeySlots slots_;
};

}  // namespace kvtier::index
