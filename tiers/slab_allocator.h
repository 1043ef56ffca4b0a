// SlabAllocator: hands out aligned, non-overlapping extents of a linear range [0, capacity).
//
// It knows nothing of what the range is: the host arena, the GPU pool and the NVMe file all use it
// to decide offsets, and own the bytes themselves. The range is cut into slabs of `slab_bytes`
// (CacheLib-style). A slab, when first needed, is given to one size class (the request rounded up
// to `alignment`) and cut into equal slots; once all of its slots are free again it goes back to
// the free-slab pool, so a workload that changes block size does not strand memory in an old class.
// A block larger than a slab takes a run of contiguous free slabs.
//
// Why slabs and not a general-purpose heap: blocks of one namespace all have the same size, so a
// slot stack per slab makes Allocate/Free O(1) with no per-block heap allocation and no external
// fragmentation inside a class; bookkeeping is allocated per slab (at most 8 bytes per alignment
// unit, 0.2% of the range at 4 KiB) and reused when the slab changes class.
//
// Offsets are multiples of `alignment` relative to 0 (O_DIRECT and huge pages need that). The last
// slab may be shorter than `slab_bytes` when the capacity is not a multiple of it; only the tail
// below `alignment` is never handed out.
//
// Small slots: with `small_slot_max_bytes` set, a request of at most that many bytes gets a slot
// of its size rounded up to a power of two (64 bytes at least, and at least alignment / 64), cut
// from a page: an `alignment`-sized slot of the ordinary kind, shared by the small slots of one
// size. A 28-byte value (an LMCache metadata record) then takes 64 bytes, not 4 KiB, and a size
// of small values holds at most one partly used page, not a slab of its own. A small slot is
// aligned to its size only: for memory the CPU copies to and from (the host arena); a tier that
// moves it to O_DIRECT storage bounces it through an aligned buffer. Pages cost about 200 bytes
// of bookkeeping each (5% of a 4 KiB page), only while they hold small slots.
//
// Thread safety: none. The allocator is a plain data structure; its owner (a Tier) serialises every
// call, including the const ones, under its own mutex.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

class SlabAllocator {
 public:
  // Slot lengths are kept as 32-bit numbers per slot, which caps a slab at 2 GiB; larger blocks
  // still work, as multi-slab runs.
  static constexpr uint64_t kMaxSlabBytes = uint64_t{1} << 31;

  struct Options {
    uint64_t capacity_bytes = 0;
    uint64_t slab_bytes = uint64_t{64} << 20;  // one 512-token Llama-8B block; see DESIGN.md
    uint64_t alignment = 4096;                 // the O_DIRECT and page granularity
    uint64_t small_slot_max_bytes = 0;         // small slots (above); 0: off
  };
  static constexpr uint64_t kSmallSlotMinBytes = 64;  // a cache line: no two writers share one

  // Validates `options` and builds the allocator. Errors (kInvalidArgument, naming the bad key):
  // alignment not a power of two; slab_bytes zero, above kMaxSlabBytes or not a multiple of
  // alignment; capacity_bytes smaller than alignment; small_slot_max_bytes above 65535.
  // A capacity below slab_bytes gives one slab of the whole capacity rounded down to alignment.
  static Result<SlabAllocator> Create(const Options& options);

  SlabAllocator(SlabAllocator&&) = default;
  SlabAllocator& operator=(SlabAllocator&&) = default;
  SlabAllocator(const SlabAllocator&) = delete;
  SlabAllocator& operator=(const SlabAllocator&) = delete;

  // Returns Extent{offset, length = bytes} with offset a multiple of alignment(), or for a small
  // slot (small_slot_max_bytes) a multiple of its slot size. Errors:
  // kInvalidArgument for 0 bytes; kRejected when bytes > capacity_bytes() (it can never fit);
  // kBusy when no slot or run of slabs is free now: free something and retry. O(1) amortised for
  // blocks up to slab_bytes(); a multi-slab block scans the slab table (first fit).
  Result<Extent> Allocate(uint64_t bytes);

  // Returns an extent exactly as Allocate handed it out. A double free, an extent never handed
  // out or one with a different length returns kInternal and changes nothing: it is a caller bug,
  // and the allocator stays consistent so the daemon can report it and keep serving.
  Status Free(const Extent& extent);

  // capacity_bytes: bytes that can be handed out (the capacity rounded down to alignment).
  // used_bytes: sum of the requested lengths of live extents. reserved_bytes: bytes of the slabs
  // that hold at least one live extent, i.e. that no other size class can take now; a slab whose
  // slots are all free counts as free. fragmentation = 1 - used / reserved (0 when none reserved):
  // slot rounding, slab tails that fit no whole slot, and free slots in partly used slabs.
  TierStats Stats() const;

  // The whole slabs `extent` lies in: the smallest range whose emptying returns a slab to the
  // shared pool, so that any size class can use it. The store empties such a range when LRU
  // eviction of other sizes cannot make room for a block (slab calcification).
  Extent ReclaimUnit(const Extent& extent) const;
  // The bytes a block of `bytes` takes: its small slot, its slot (rounded up to alignment), or
  // its run of whole slabs. Depends on the options only.
  uint64_t FootprintOf(uint64_t bytes) const;

  uint64_t capacity_bytes() const { return capacity_bytes_; }
  uint64_t slab_bytes() const { return slab_bytes_; }
  uint64_t alignment() const { return alignment_; }
  uint32_t slab_count() const { return static_cast<uint32_t>(slabs_.size()); }
  uint32_t free_slab_count() const { return free_slab_count_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  enum class SlabKind : uint8_t { kFree, kSlots, kRunHead, kRunBody };

  struct Slab {
    uint64_t bytes = 0;  // slab length: slab_bytes_, or less for the last slab
    SlabKind kind = SlabKind::kFree;
    uint32_t prev = kNone;  // links in the free-slab list or in its class's partial list
    uint32_t next = kNone;
    uint32_t size_class = kNone;  // kSlots: index into classes_
    uint32_t slot_count = 0;      // kSlots: whole slots that fit in `bytes`
    uint32_t used_slots = 0;      // kSlots: live extents; 0 means the slab is back in the pool
    uint32_t never_used = 0;      // kSlots: slots [never_used, slot_count) were never handed out
    uint32_t run_slabs = 0;       // kRunHead: slabs in the run
    uint64_t run_length = 0;      // kRunHead: the requested length
    // kSlots: freed slots, popped before never_used grows, so a reused slab needs no reset pass.
    std::vector<uint32_t> free_slots;
    // kSlots: requested length per slot, 0 when free. Detects double and mismatched frees and
    // keeps used_bytes exact without trusting the caller's length.
    std::vector<uint32_t> slot_length;
  };

  // A doubly linked list threaded through Slab::prev/next; a slab is in at most one list.
  struct SlabList {
    uint32_t head = kNone;
  };

  struct SizeClass {
    uint64_t slot_bytes = 0;
    SlabList partial;  // slabs of this class with at least one used and one free slot
  };

  SlabAllocator(uint64_t capacity_bytes, uint64_t slab_bytes, uint64_t alignment,
                uint64_t small_slot_max_bytes);
  // Small slots (see the header): the slot size of a small request, or 0 for one that is not
  // small. Allocate/Free of those go through pages.
  uint64_t SmallSlotBytes(uint64_t bytes) const;
  Result<Extent> AllocateSmall(uint64_t bytes, uint64_t slot_bytes);
  Status FreeSmall(const Extent& extent);

  // A page of small slots of one size: which are free, and each one's requested length.
  struct SmallPage {
    uint64_t slot_bytes = 0;
    uint64_t free_mask = 0;             // bit i: slot i free (at most 64 slots a page)
    std::vector<uint16_t> slot_length;  // 0 when free
    size_t partial_at = SIZE_MAX;       // its place in small_partial_, while it has a free slot
  };
  void AddPartial(uint64_t page_offset, SmallPage& page);
  void RemovePartial(SmallPage& page);

  Result<Extent> AllocateSlot(uint64_t bytes);
  Result<Extent> AllocateRun(uint64_t bytes);
  Status FreeSlot(uint32_t slab_index, const Extent& extent);
  Status FreeRun(uint32_t slab_index, const Extent& extent);

  uint32_t ClassFor(uint64_t slot_bytes);
  // Takes a free slab that can hold at least one slot of `slot_bytes`, or kNone.
  uint32_t TakeFreeSlab(uint64_t slot_bytes);
  void AssignSlab(uint32_t slab_index, uint32_t class_index);
  void ReleaseSlab(uint32_t slab_index);

  void PushFront(SlabList& list, uint32_t slab_index);
  void Remove(SlabList& list, uint32_t slab_index);

  uint64_t SlabOffset(uint32_t slab_index) const { return slab_index * slab_bytes_; }

  uint64_t capacity_bytes_;
  uint64_t slab_bytes_;
  uint64_t alignment_;
  uint64_t small_slot_max_bytes_;
  std::unordered_map<uint64_t, SmallPage> small_pages_;  // by page offset
  // Per slot size, the pages with a free slot (the page offsets).
  std::unordered_map<uint64_t, std::vector<uint64_t>> small_partial_;
  std::vector<Slab> slabs_;
  std::vector<SizeClass> classes_;
  std::unordered_map<uint64_t, uint32_t> class_by_slot_bytes_;
  SlabList free_slabs_;  // LIFO: a class that just emptied a slab gets it back first
  uint32_t free_slab_count_ = 0;
  uint64_t used_bytes_ = 0;
  uint64_t reserved_bytes_ = 0;
  uint64_t block_count_ = 0;
};

}  // namespace kvtier::tiers
