#include "tiers/slab_allocator.h"

#include <algorithm>
#include <bit>
#include <string>
#include <utility>

namespace kvtier::tiers {
namespace {

uint64_t RoundUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

std::string Describe(const Extent& extent) {
  return "extent {offset " + std::to_string(extent.offset) + ", length " +
         std::to_string(extent.length) + "}";
}

}  // namespace

Result<SlabAllocator> SlabAllocator::Create(const Options& options) {
  const uint64_t alignment = options.alignment;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return InvalidArgument("alignment must be a power of two, got " + std::to_string(alignment));
  }
  if (options.slab_bytes == 0 || options.slab_bytes % alignment != 0 ||
      options.slab_bytes > kMaxSlabBytes) {
    return InvalidArgument("slab_bytes must be a non-zero multiple of alignment (" +
                           std::to_string(alignment) + ") of at most 2 GiB, got " +
                           std::to_string(options.slab_bytes));
  }
  if (options.small_slot_max_bytes > UINT16_MAX) {
    return InvalidArgument("small_slot_max_bytes must be at most 65535, got " +
                           std::to_string(options.small_slot_max_bytes));
  }
  if (options.capacity_bytes < alignment) {
    return InvalidArgument("capacity_bytes must be at least alignment (" +
                           std::to_string(alignment) + "), got " +
                           std::to_string(options.capacity_bytes));
  }
  const uint64_t usable = options.capacity_bytes & ~(alignment - 1);
  const uint64_t slab_bytes = std::min(options.slab_bytes, usable);
  // Slab indices are 32-bit with one value reserved as the list terminator.
  if ((usable + slab_bytes - 1) / slab_bytes >= kNone) {
    return InvalidArgument("capacity_bytes / slab_bytes must be below 2^32 slabs");
  }
  return SlabAllocator(usable, slab_bytes, alignment, options.small_slot_max_bytes);
}

SlabAllocator::SlabAllocator(uint64_t capacity_bytes, uint64_t slab_bytes, uint64_t alignment,
                             uint64_t small_slot_max_bytes)
    : capacity_bytes_(capacity_bytes),
      slab_bytes_(slab_bytes),
      alignment_(alignment),
      small_slot_max_bytes_(small_slot_max_bytes) {
  const uint64_t count = (capacity_bytes + slab_bytes - 1) / slab_bytes;
  slabs_.resize(count);
  // Pushed from the top so that slab 0 is the head: low offsets are used first, which keeps the
  // high end free for multi-slab runs for as long as possible.
  for (uint64_t i = count; i-- > 0;) {
    slabs_[i].bytes = std::min(slab_bytes, capacity_bytes - i * slab_bytes);
    PushFront(free_slabs_, static_cast<uint32_t>(i));
  }
  free_slab_count_ = static_cast<uint32_t>(count);
}

Result<Extent> SlabAllocator::Allocate(uint64_t bytes) {
  if (bytes == 0) return InvalidArgument("cannot allocate 0 bytes");
  if (bytes > capacity_bytes_) {
    return Rejected("block of " + std::to_string(bytes) + " bytes exceeds the capacity of " +
                    std::to_string(capacity_bytes_));
  }
  if (const uint64_t slot_bytes = SmallSlotBytes(bytes); slot_bytes != 0) {
    return AllocateSmall(bytes, slot_bytes);
  }
  return bytes <= slab_bytes_ ? AllocateSlot(bytes) : AllocateRun(bytes);
}

uint64_t SlabAllocator::SmallSlotBytes(uint64_t bytes) const {
  if (bytes > small_slot_max_bytes_) return 0;
  // At most 64 slots a page, so that one 64-bit mask says which are free.
  const uint64_t least = std::max(kSmallSlotMinBytes, alignment_ / 64);
  const uint64_t slot_bytes = std::bit_ceil(std::max(bytes, least));
  return slot_bytes < alignment_ ? slot_bytes : 0;
}

Result<Extent> SlabAllocator::AllocateSmall(uint64_t bytes, uint64_t slot_bytes) {
  std::vector<uint64_t>& partial = small_partial_[slot_bytes];
  if (partial.empty()) {
    // A new page: an ordinary slot, counted as the small slots cut from it, not as a block.
    KVTIER_ASSIGN_OR_RETURN(const Extent page, AllocateSlot(alignment_));
    used_bytes_ -= page.length;
    --block_count_;
    const auto slots = static_cast<uint32_t>(alignment_ / slot_bytes);
    SmallPage& p = small_pages_[page.offset];
    p.slot_bytes = slot_bytes;
    p.free_mask = slots == 64 ? ~uint64_t{0} : (uint64_t{1} << slots) - 1;
    p.slot_length.assign(slots, 0);
    AddPartial(page.offset, p);
  }
  const uint64_t page_offset = partial.back();
  SmallPage& p = small_pages_.at(page_offset);
  const int slot = std::countr_zero(p.free_mask);
  p.free_mask &= p.free_mask - 1;
  p.slot_length[slot] = static_cast<uint16_t>(bytes);
  if (p.free_mask == 0) RemovePartial(p);
  used_bytes_ += bytes;
  ++block_count_;
  return Extent{page_offset + static_cast<uint64_t>(slot) * slot_bytes, bytes};
}

Status SlabAllocator::FreeSmall(const Extent& extent) {
  const uint64_t page_offset = extent.offset & ~(alignment_ - 1);
  auto it = small_pages_.find(page_offset);
  if (it == small_pages_.end()) {
    return Internal("free of " + Describe(extent) + " that is not allocated (double free?)");
  }
  SmallPage& p = it->second;
  const uint64_t within = extent.offset - page_offset;
  const uint64_t slot = within / p.slot_bytes;
  if (within % p.slot_bytes != 0 || p.slot_length[slot] == 0) {
    return Internal("free of " + Describe(extent) + " that is not allocated (double free?)");
  }
  if (p.slot_length[slot] != extent.length) {
    return Internal("free of " + Describe(extent) + " but the block has length " +
                    std::to_string(p.slot_length[slot]));
  }
  const bool was_full = p.free_mask == 0;
  p.slot_length[slot] = 0;
  p.free_mask |= uint64_t{1} << slot;
  used_bytes_ -= extent.length;
  --block_count_;
  if (std::popcount(p.free_mask) == static_cast<int>(p.slot_length.size())) {
    // Empty: the page goes back as the ordinary slot it was.
    if (!was_full) RemovePartial(p);
    small_pages_.erase(it);
    used_bytes_ += alignment_;
    ++block_count_;
    return Free(Extent{page_offset, alignment_});
  }
  if (was_full) AddPartial(page_offset, p);
  return Status::Ok();
}

void SlabAllocator::AddPartial(uint64_t page_offset, SmallPage& page) {
  std::vector<uint64_t>& partial = small_partial_[page.slot_bytes];
  page.partial_at = partial.size();
  partial.push_back(page_offset);
}

// Swaps the last page of the list into the page's place: O(1) whatever the number of pages.
void SlabAllocator::RemovePartial(SmallPage& page) {
  std::vector<uint64_t>& partial = small_partial_[page.slot_bytes];
  const uint64_t last = partial.back();
  partial[page.partial_at] = last;
  small_pages_.at(last).partial_at = page.partial_at;
  partial.pop_back();
  page.partial_at = SIZE_MAX;
}

Result<Extent> SlabAllocator::AllocateSlot(uint64_t bytes) {
  const uint32_t class_index = ClassFor(RoundUp(bytes, alignment_));
  SlabList& partial = classes_[class_index].partial;
  uint32_t slab_index = partial.head;
  if (slab_index == kNone) {
    slab_index = TakeFreeSlab(classes_[class_index].slot_bytes);
    if (slab_index == kNone) {
      return Busy("no free slot or slab for a block of " + std::to_string(bytes) + " bytes");
    }
    AssignSlab(slab_index, class_index);
    PushFront(partial, slab_index);
  }
  Slab& slab = slabs_[slab_index];
  uint32_t slot;
  if (!slab.free_slots.empty()) {
    slot = slab.free_slots.back();
    slab.free_slots.pop_back();
  } else {
    slot = slab.never_used++;
  }
  slab.slot_length[slot] = static_cast<uint32_t>(bytes);
  if (++slab.used_slots == slab.slot_count) Remove(partial, slab_index);
  used_bytes_ += bytes;
  ++block_count_;
  return Extent{SlabOffset(slab_index) + slot * classes_[class_index].slot_bytes, bytes};
}

Result<Extent> SlabAllocator::AllocateRun(uint64_t bytes) {
  // First fit over the slab table. Multi-slab blocks are rare (above 64 MiB by default) and the
  // table is small (16K entries for 1 TiB), so a scan is cheaper to keep correct than a second
  // index of free runs.
  uint32_t run_start = 0;
  uint64_t run_bytes = 0;
  uint32_t end = kNone;
  for (uint32_t i = 0; i < slab_count(); ++i) {
    if (slabs_[i].kind != SlabKind::kFree) {
      run_bytes = 0;
      continue;
    }
    if (run_bytes == 0) run_start = i;
    run_bytes += slabs_[i].bytes;
    if (run_bytes >= bytes) {
      end = i + 1;
      break;
    }
  }
  if (end == kNone) {
    return Busy("no run of free slabs for a block of " + std::to_string(bytes) + " bytes");
  }
  for (uint32_t i = run_start; i < end; ++i) {
    Slab& slab = slabs_[i];
    Remove(free_slabs_, i);
    slab.kind = i == run_start ? SlabKind::kRunHead : SlabKind::kRunBody;
    reserved_bytes_ += slab.bytes;
  }
  Slab& head = slabs_[run_start];
  head.run_slabs = end - run_start;
  head.run_length = bytes;
  free_slab_count_ -= head.run_slabs;
  used_bytes_ += bytes;
  ++block_count_;
  return Extent{SlabOffset(run_start), bytes};
}

Status SlabAllocator::Free(const Extent& extent) {
  if (extent.length == 0 || extent.offset >= capacity_bytes_ ||
      extent.length > capacity_bytes_ - extent.offset) {
    return Internal("free of " + Describe(extent) + " outside the allocator's range");
  }
  if (SmallSlotBytes(extent.length) != 0) return FreeSmall(extent);
  // A page cut into small slots is an ordinary slot to the slab below, but it was never handed
  // out as one: freeing it would free the small blocks in it under their owners.
  if (small_pages_.contains(extent.offset)) {
    return Internal("free of " + Describe(extent) + ", a page of small slots, not a block");
  }
  const auto slab_index = static_cast<uint32_t>(extent.offset / slab_bytes_);
  switch (slabs_[slab_index].kind) {
    case SlabKind::kSlots:
      return FreeSlot(slab_index, extent);
    case SlabKind::kRunHead:
      return FreeRun(slab_index, extent);
    case SlabKind::kFree:
    case SlabKind::kRunBody:
      break;
  }
  return Internal("free of " + Describe(extent) + " that is not allocated (double free?)");
}

Status SlabAllocator::FreeSlot(uint32_t slab_index, const Extent& extent) {
  Slab& slab = slabs_[slab_index];
  SizeClass& size_class = classes_[slab.size_class];
  const uint64_t within = extent.offset - SlabOffset(slab_index);
  const uint64_t slot = within / size_class.slot_bytes;
  if (within % size_class.slot_bytes != 0 || slot >= slab.slot_count ||
      slab.slot_length[slot] == 0) {
    return Internal("free of " + Describe(extent) + " that is not allocated (double free?)");
  }
  if (slab.slot_length[slot] != extent.length) {
    return Internal("free of " + Describe(extent) + " but the block has length " +
                    std::to_string(slab.slot_length[slot]));
  }
  slab.slot_length[slot] = 0;
  used_bytes_ -= extent.length;
  --block_count_;
  const bool was_full = slab.used_slots == slab.slot_count;
  if (--slab.used_slots == 0) {
    if (!was_full) Remove(size_class.partial, slab_index);
    ReleaseSlab(slab_index);
    return Status::Ok();
  }
  slab.free_slots.push_back(static_cast<uint32_t>(slot));  // capacity reserved in AssignSlab
  if (was_full) PushFront(size_class.partial, slab_index);
  return Status::Ok();
}

Status SlabAllocator::FreeRun(uint32_t slab_index, const Extent& extent) {
  const Slab& head = slabs_[slab_index];
  if (extent.offset != SlabOffset(slab_index) || extent.length != head.run_length) {
    return Internal("free of " + Describe(extent) + " but the block at this slab has length " +
                    std::to_string(head.run_length));
  }
  const uint32_t end = slab_index + head.run_slabs;
  used_bytes_ -= extent.length;
  --block_count_;
  // From the top, so the run's first slab ends up at the head of the free list.
  for (uint32_t i = end; i-- > slab_index;) ReleaseSlab(i);
  return Status::Ok();
}

uint32_t SlabAllocator::ClassFor(uint64_t slot_bytes) {
  auto [it, inserted] =
      class_by_slot_bytes_.try_emplace(slot_bytes, static_cast<uint32_t>(classes_.size()));
  if (inserted) classes_.push_back(SizeClass{slot_bytes, SlabList{}});
  return it->second;
}

uint32_t SlabAllocator::TakeFreeSlab(uint64_t slot_bytes) {
  // Only the last slab can be shorter than slab_bytes_, so this skips at most one slab.
  for (uint32_t i = free_slabs_.head; i != kNone; i = slabs_[i].next) {
    if (slabs_[i].bytes >= slot_bytes) {
      Remove(free_slabs_, i);
      --free_slab_count_;
      return i;
    }
  }
  return kNone;
}

void SlabAllocator::AssignSlab(uint32_t slab_index, uint32_t class_index) {
  Slab& slab = slabs_[slab_index];
  slab.kind = SlabKind::kSlots;
  slab.size_class = class_index;
  slab.slot_count = static_cast<uint32_t>(slab.bytes / classes_[class_index].slot_bytes);
  slab.used_slots = 0;
  slab.never_used = 0;
  // Every entry of a free slab's slot_length is 0 (each Free zeroes its slot), so resizing keeps
  // the invariant without a pass over the slots. Both vectors only grow: a slab that has served a
  // small class keeps its capacity and later reassignments allocate nothing.
  slab.slot_length.resize(slab.slot_count);
  slab.free_slots.clear();
  slab.free_slots.reserve(slab.slot_count);
  reserved_bytes_ += slab.bytes;
}

void SlabAllocator::ReleaseSlab(uint32_t slab_index) {
  Slab& slab = slabs_[slab_index];
  slab.kind = SlabKind::kFree;
  slab.size_class = kNone;
  slab.used_slots = 0;
  slab.never_used = 0;
  slab.run_slabs = 0;
  slab.run_length = 0;
  slab.free_slots.clear();
  PushFront(free_slabs_, slab_index);
  ++free_slab_count_;
  reserved_bytes_ -= slab.bytes;
}

void SlabAllocator::PushFront(SlabList& list, uint32_t slab_index) {
  Slab& slab = slabs_[slab_index];
  slab.prev = kNone;
  slab.next = list.head;
  if (list.head != kNone) slabs_[list.head].prev = slab_index;
  list.head = slab_index;
}

void SlabAllocator::Remove(SlabList& list, uint32_t slab_index) {
  Slab& slab = slabs_[slab_index];
  if (slab.prev != kNone) {
    slabs_[slab.prev].next = slab.next;
  } else {
    list.head = slab.next;
  }
  if (slab.next != kNone) slabs_[slab.next].prev = slab.prev;
  slab.prev = kNone;
  slab.next = kNone;
}

uint64_t SlabAllocator::FootprintOf(uint64_t bytes) const {
  if (const uint64_t small = SmallSlotBytes(bytes); small != 0) return small;
  const uint64_t unit = bytes <= slab_bytes_ ? alignment_ : slab_bytes_;
  return (bytes + unit - 1) / unit * unit;
}

Extent SlabAllocator::ReclaimUnit(const Extent& extent) const {
  if (slabs_.empty()) return extent;
  const uint64_t first = std::min<uint64_t>(extent.offset / slab_bytes_, slabs_.size() - 1);
  const uint64_t end_byte = extent.offset + std::max<uint64_t>(extent.length, 1);
  const uint64_t last = std::min<uint64_t>((end_byte - 1) / slab_bytes_, slabs_.size() - 1);
  const uint64_t start = SlabOffset(static_cast<uint32_t>(first));
  const uint64_t end = SlabOffset(static_cast<uint32_t>(last)) + slabs_[last].bytes;
  return Extent{start, end - start};
}

TierStats SlabAllocator::Stats() const {
  TierStats stats;
  stats.capacity_bytes = capacity_bytes_;
  stats.used_bytes = used_bytes_;
  stats.reserved_bytes = reserved_bytes_;
  stats.block_count = block_count_;
  if (reserved_bytes_ > 0) {
    stats.fragmentation =
        1.0 - static_cast<double>(used_bytes_) / static_cast<double>(reserved_bytes_);
  }
  return stats;
}

}  // namespace kvtier::tiers
