// ExtentAllocator: places blocks in the NVMe data region as whole, 4 KiB-aligned extents.
//
// A block of P payload bytes takes ExtentFootprint(P) = 4 KiB record header + P rounded up to 4 KiB,
// written once with aligned direct I/O: there is never a read-modify-write, and the device writes
// (footprint / P) bytes per payload byte, 1.002 for a 2 MiB block.
//
// Why exact extents from a best-fit free map, and not CacheLib-style regions or slab slots:
// - Regions (log-structured, evicted whole) exist to batch small items into large device writes and
//   to let the cache evict by region. Our blocks are already 0.5-64 MiB, so batching buys nothing,
//   and the store, not the tier, chooses victims one block at a time by LRU; region eviction would
//   throw away up to a region of warm neighbours with every victim.
// - Slab slots (tiers/slab_allocator) waste the slab tail (a 64 MiB + 4 KiB extent does not fit a
//   64 MiB slab at all and needs a multi-slab path) and cannot take back a given extent at recovery.
// - The free map gives the size-class behaviour where it matters: blocks of one namespace all have
//   one footprint, so a freed extent is exactly the hole the next block of that namespace fills
//   (best fit, lowest offset first), and neighbours coalesce, so a namespace with another block size
//   can use space freed by the first. Claim() re-marks the extents of recovered blocks at start-up.
// Cost: O(log n) per call and one map node per free hole, fine at thousands of blocks per second.
//
// Segments: with several data files the region is their concatenation, one equal segment per file.
// An extent never straddles two segments (holes do not merge across a boundary), and Allocate
// starts its search at the segment after the last one it used, so consecutive blocks go to
// different files and their I/O runs on different devices at once.
//
// Offsets are relative to the start of the data region. Extent::length is the payload length the
// caller asked for; the footprint is derived from it, so Free needs nothing else.
//
// Thread safety: none; NvmeTier serialises every call under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "tiers/tier.h"

namespace kvtier::tiers::nvme {

class ExtentAllocator {
 public:
  // segment_bytes: the size of each segment, a multiple of kBlockAlignment; the region is
  // segments * segment_bytes. One segment by default.
  explicit ExtentAllocator(uint64_t segment_bytes, uint32_t segments = 1);

  // Errors: kInvalidArgument for 0 bytes; kRejected when the footprint exceeds a segment;
  // kBusy when no free hole is large enough now (free something and retry; freed neighbours merge).
  Result<Extent> Allocate(uint64_t payload_bytes);

  // Marks `extent` (of a block found at recovery) as in use. kCorruption when it lies outside the
  // region, straddles two segments, is misaligned, or overlaps an extent already in use: the
  // caller drops that record.
  Status Claim(const Extent& extent);

  // Returns an extent from Allocate or Claim. kInternal (nothing changes) for an extent not in use
  // or with another length: a caller bug.
  Status Free(const Extent& extent);

  // capacity: the region; used: payload bytes of live extents; reserved: their footprints;
  // fragmentation = 1 - used / reserved (header and tail rounding only: free holes are not counted).
  TierStats Stats() const;

  // True when `extent` was handed out (Allocate or Claim) with exactly this length and not freed.
  bool IsLive(const Extent& extent) const {
    auto it = live_.find(extent.offset);
    return it != live_.end() && it->second == extent.length;
  }

  uint64_t free_bytes() const { return capacity_bytes_ - reserved_bytes_; }
  uint64_t segment_bytes() const { return segment_bytes_; }
  // The segment holding `offset`.
  uint32_t Segment(uint64_t offset) const { return static_cast<uint32_t>(offset / segment_bytes_); }
  // The largest free hole, in bytes.
  uint64_t largest_free_bytes() const;

  // Where a block of `payload_bytes` fits once every extent that starts in the range is freed: its
  // footprint from the extent at `victim_offset` on, or from the free hole that ends there
  // (tiers/room_window.h); nullopt when that would run past the victim's segment.
  std::optional<Extent> RoomAround(uint64_t victim_offset, uint64_t payload_bytes) const;

 private:
  void InsertFree(uint64_t offset, uint64_t bytes);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);
  void TakeFrom(std::map<uint64_t, uint64_t>::iterator hole, uint64_t offset, uint64_t bytes);

  const uint64_t segment_bytes_;
  const uint64_t capacity_bytes_;
  // offset -> bytes; two holes are adjacent only across a segment boundary.
  std::map<uint64_t, uint64_t> free_by_offset_;
  std::vector<std::set<std::pair<uint64_t, uint64_t>>> free_by_size_;  // per segment: (bytes, offset)
  uint32_t next_segment_ = 0;  // where the next Allocate starts looking
  std::unordered_map<uint64_t, uint64_t> live_;         // offset -> payload bytes
  uint64_t used_bytes_ = 0;
  uint64_t reserved_bytes_ = 0;
};

}  // namespace kvtier::tiers::nvme
