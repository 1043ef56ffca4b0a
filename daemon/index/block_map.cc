#include "daemon/index/block_map.h"

namespace kvtier::index {

std::pair<BlockMeta*, bool> BlockMap::TryEmplace(const BlockKey& key, const BlockMeta& meta) {
  if (BlockMeta* found = Find(key)) return {found, false};
  if (size_ == chunks_.size() * kChunkEntries) {
    chunks_.push_back(std::make_unique_for_overwrite<Entry[]>(kChunkEntries));
  }
  const auto at = static_cast<uint32_t>(size_);
  Entry& entry = EntryAt(at);
  entry.key = key;
  entry.meta = meta;
  ++size_;
  slots_.Insert(at, KeyAt());
  return {&entry.meta, true};
}

void BlockMap::FillHole(uint32_t at) {
  const auto last = static_cast<uint32_t>(size_ - 1);
  if (at != last) {
    Entry& moved = EntryAt(last);
    slots_.Renumber(moved.key, last, at);
    EntryAt(at) = moved;
  }
  --size_;
  // Keep one spare chunk, so that a shard hovering at a chunk's edge does not allocate and free
  // one per put and erase.
  if (chunks_.size() * kChunkEntries >= size_ + 2 * kChunkEntries) chunks_.pop_back();
}

}  // namespace kvtier::index
