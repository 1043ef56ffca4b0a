// HostTier: the pinned host-RAM tier, a HostArena carved up by a SlabAllocator.
//
// Blocks live at arena offsets chosen by the allocator; Write and Read are memcpy, and Address
// gives the bytes directly so the store can hand a client an offset into the shared memfd instead
// of copying through the daemon. The same class, created with another TierId, is the memory-backed
// stand-in for the GPU tier on machines without one.
//
// Ownership: the tier owns its arena and allocator. Thread safety: every method may be called from
// any thread; the allocator sits under one mutex, held only for bookkeeping, never during a copy.
// Copies into or out of an extent are synchronised by its holder, as tiers/tier.h requires.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/types.h"
#include "tiers/host/host_arena.h"
#include "tiers/slab_allocator.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

class HostTier final : public Tier {
 public:
  struct Options {
    uint64_t capacity_bytes = 0;
    uint64_t slab_bytes = SlabAllocator::Options{}.slab_bytes;
    uint64_t alignment = SlabAllocator::Options{}.alignment;
    // Small values (generic metadata records, tiny blocks) share slabs in slots of their own size
    // rounded up to a power of two, instead of a 4 KiB slot each (SlabAllocator, small slots).
    uint64_t small_slot_max_bytes = 2048;
    bool try_huge_pages = true;
    bool try_mlock = true;
    std::string name;  // memfd name; empty: "kvtier-<tier name>"
  };

  // Builds the allocator (validating slab_bytes and alignment) and then maps the arena. Errors:
  // kInvalidArgument for bad options, naming the key; the arena's errors (HostArena::Create).
  // `id` is kHost for the real host tier; kGpu gives a memory-backed fake GPU tier for tests.
  static Result<std::unique_ptr<HostTier>> Create(const Options& options,
                                                  TierId id = TierId::kHost);

  TierId id() const override { return id_; }
  // See Tier::Allocate; offsets are multiples of options.alignment within the arena, except those
  // of small slots (options.small_slot_max_bytes), which are multiples of their slot size.
  Result<Extent> Allocate(uint64_t bytes) override;
  // An invalid free (double, unknown or wrong length) changes nothing and is counted in
  // invalid_free_count(): the caller has a bug, but the tier stays consistent.
  void Free(const Extent& extent) override;
  // kInvalidArgument when src is longer than the extent or the extent lies outside the arena.
  Status Write(const Extent& extent, std::span<const std::byte> src) override;
  // kInvalidArgument when dst is longer than the extent or the extent lies outside the arena.
  Status Read(const Extent& extent, std::span<std::byte> dst) override;
  // base + offset, or nullptr when the extent lies outside the arena.
  std::byte* Address(const Extent& extent) override;
  // The arena's memfd (kMemfd, device -1): clients map it for the shared-memory path.
  Result<PoolExport> ExportForClients() override;
  TierStats Stats() const override;
  // The slab (or run of slabs) around `victim`, whatever room is wanted; see Tier::ReclaimUnit.
  Extent ReclaimUnit(const Extent& victim, uint64_t room_bytes) const override;
  // The slot (or run of slabs) the block takes (SlabAllocator::FootprintOf).
  uint64_t FootprintOf(uint64_t bytes) const override;

  // The arena, for reporting huge-page and mlock state and for pinning it.
  const HostArena& arena() const { return *arena_; }
  uint64_t invalid_free_count() const { return invalid_frees_.load(std::memory_order_relaxed); }

 private:
  HostTier(TierId id, std::unique_ptr<HostArena> arena, SlabAllocator allocator);

  bool InArena(const Extent& extent) const;

  const TierId id_;
  const std::unique_ptr<HostArena> arena_;
  mutable Mutex mu_;
  SlabAllocator allocator_ GUARDED_BY(mu_);
  std::atomic<uint64_t> invalid_frees_{0};
};

}  // namespace kvtier::tiers
