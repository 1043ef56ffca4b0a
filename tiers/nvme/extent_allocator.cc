#include "tiers/nvme/extent_allocator.h"

#include <algorithm>
#include <string>

#include "tiers/nvme/nvme_format.h"
#include "tiers/room_window.h"

namespace kvtier::tiers::nvme {

ExtentAllocator::ExtentAllocator(uint64_t segment_bytes, uint32_t segments)
    : segment_bytes_(std::max<uint64_t>(segment_bytes / kBlockAlignment, 1) * kBlockAlignment),
      capacity_bytes_(segment_bytes / kBlockAlignment * kBlockAlignment * segments),
      free_by_size_(segments) {
  if (capacity_bytes_ == 0) return;
  for (uint32_t s = 0; s < segments; ++s) InsertFree(s * segment_bytes_, segment_bytes_);
}

Result<Extent> ExtentAllocator::Allocate(uint64_t payload_bytes) {
  if (payload_bytes == 0) return InvalidArgument("nvme: allocation of 0 bytes");
  if (payload_bytes > segment_bytes_ || ExtentFootprint(payload_bytes) > segment_bytes_ ||
      capacity_bytes_ == 0) {
    return Rejected("nvme: a block of " + std::to_string(payload_bytes) +
                    " bytes does not fit a data file of " + std::to_string(segment_bytes_));
  }
  uint64_t need = ExtentFootprint(payload_bytes);
  uint32_t segments = static_cast<uint32_t>(free_by_size_.size());
  uint64_t offset = UINT64_MAX;
  for (uint32_t i = 0; i < segments && offset == UINT64_MAX; ++i) {
    uint32_t s = (next_segment_ + i) % segments;
    auto best = free_by_size_[s].lower_bound({need, 0});
    if (best == free_by_size_[s].end()) continue;
    offset = best->second;
    next_segment_ = (s + 1) % segments;
  }
  if (offset == UINT64_MAX) {
    return Busy("nvme: no free extent of " + std::to_string(need) + " bytes");
  }
  TakeFrom(free_by_offset_.find(offset), offset, need);
  live_.emplace(offset, payload_bytes);
  used_bytes_ += payload_bytes;
  reserved_bytes_ += need;
  return Extent{offset, payload_bytes};
}

Status ExtentAllocator::Claim(const Extent& extent) {
  if (extent.length == 0 || extent.offset % kBlockAlignment != 0 ||
      extent.offset >= capacity_bytes_ || extent.length > capacity_bytes_ ||
      ExtentFootprint(extent.length) > capacity_bytes_ - extent.offset ||
      Segment(extent.offset) != Segment(extent.offset + ExtentFootprint(extent.length) - 1)) {
    return Corruption("nvme: extent " + std::to_string(extent.offset) + "+" +
                      std::to_string(extent.length) + " lies outside the data region");
  }
  uint64_t need = ExtentFootprint(extent.length);
  auto hole = free_by_offset_.upper_bound(extent.offset);
  if (hole == free_by_offset_.begin()) return Corruption("nvme: extent overlaps one in use");
  --hole;
  if (hole->first + hole->second < extent.offset + need) {
    return Corruption("nvme: extent at " + std::to_string(extent.offset) +
                      " overlaps one in use");
  }
  TakeFrom(hole, extent.offset, need);
  live_.emplace(extent.offset, extent.length);
  used_bytes_ += extent.length;
  reserved_bytes_ += need;
  return Status::Ok();
}

Status ExtentAllocator::Free(const Extent& extent) {
  auto it = live_.find(extent.offset);
  if (it == live_.end() || it->second != extent.length) {
    return Internal("nvme: free of an extent not in use: " + std::to_string(extent.offset) + "+" +
                    std::to_string(extent.length));
  }
  live_.erase(it);
  uint64_t bytes = ExtentFootprint(extent.length);
  used_bytes_ -= extent.length;
  reserved_bytes_ -= bytes;
  uint64_t offset = extent.offset;
  // Coalesce with the free neighbours on both sides, within the segment.
  uint32_t segment = Segment(offset);
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + bytes &&
      Segment(next->first) == segment) {
    bytes += next->second;
    next = std::next(next);
    EraseFree(std::prev(next));
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset && Segment(prev->first) == segment) {
      offset = prev->first;
      bytes += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(offset, bytes);
  return Status::Ok();
}

TierStats ExtentAllocator::Stats() const {
  TierStats s;
  s.capacity_bytes = capacity_bytes_;
  s.used_bytes = used_bytes_;
  s.reserved_bytes = reserved_bytes_;
  s.block_count = live_.size();
  s.fragmentation =
      reserved_bytes_ == 0 ? 0.0 : 1.0 - static_cast<double>(used_bytes_) / reserved_bytes_;
  return s;
}

uint64_t ExtentAllocator::largest_free_bytes() const {
  uint64_t largest = 0;
  for (const auto& holes : free_by_size_) {
    if (!holes.empty()) largest = std::max(largest, holes.rbegin()->first);
  }
  return largest;
}

std::optional<Extent> ExtentAllocator::RoomAround(uint64_t victim_offset,
                                                  uint64_t payload_bytes) const {
  if (victim_offset >= capacity_bytes_) return std::nullopt;
  const uint64_t segment_begin = Segment(victim_offset) * segment_bytes_;
  return RoomWindow(free_by_offset_, victim_offset, ExtentFootprint(payload_bytes), segment_begin,
                    segment_begin + segment_bytes_);
}

void ExtentAllocator::InsertFree(uint64_t offset, uint64_t bytes) {
  free_by_offset_.emplace(offset, bytes);
  free_by_size_[Segment(offset)].emplace(bytes, offset);
}

void ExtentAllocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_[Segment(it->first)].erase({it->second, it->first});
  free_by_offset_.erase(it);
}

// Takes [offset, offset + bytes) out of the free hole `hole`, which contains it; what remains on
// either side stays free.
void ExtentAllocator::TakeFrom(std::map<uint64_t, uint64_t>::iterator hole, uint64_t offset,
                               uint64_t bytes) {
  uint64_t hole_offset = hole->first;
  uint64_t hole_end = hole->first + hole->second;
  EraseFree(hole);
  if (offset > hole_offset) InsertFree(hole_offset, offset - hole_offset);
  if (offset + bytes < hole_end) InsertFree(offset + bytes, hole_end - offset - bytes);
}

}  // namespace kvtier::tiers::nvme
