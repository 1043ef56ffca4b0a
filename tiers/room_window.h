// RoomWindow: where to make room for a large block in a tier whose free space merges freely (the
// NVMe tier's extent allocator, and the fake tier of the store's tests).
//
// Evicting least-recently-used blocks one at a time frees space scattered over the tier: a 2 MiB
// block among 8 KiB records can need hundreds of victims before two of the holes they left meet,
// and may find none large enough even then. The window is a range of `need` bytes that starts at
// the least recently used block (or at the free hole just before it, which the window then uses)
// and runs on over its neighbours: once every block that starts inside it is gone, the range is
// one free hole that takes the block. It starts where a block or a hole starts, so no block from
// before it reaches into it.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <optional>

#include "common/types.h"

namespace kvtier::tiers {

// free_by_offset: the tier's free holes (offset -> bytes). victim_offset: where the block to evict
// first starts. [region_begin, region_end): the part of the tier the window must stay inside (the
// victim's segment). nullopt when `need` bytes from there would run past region_end: the caller
// evicts the victim alone.
inline std::optional<Extent> RoomWindow(const std::map<uint64_t, uint64_t>& free_by_offset,
                                        uint64_t victim_offset, uint64_t need,
                                        uint64_t region_begin, uint64_t region_end) {
  uint64_t start = victim_offset;
  auto after = free_by_offset.upper_bound(victim_offset);
  if (after != free_by_offset.begin()) {
    auto hole = std::prev(after);
    if (hole->first >= region_begin && hole->first + hole->second == victim_offset) {
      start = hole->first;
    }
  }
  if (need > region_end - start) return std::nullopt;
  return Extent{start, need};
}

}  // namespace kvtier::tiers
