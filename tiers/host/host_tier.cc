#include "tiers/host/host_tier.h"

#include <cstring>
#include <utility>

#include "common/stream_copy.h"

namespace kvtier::tiers {

Result<std::unique_ptr<HostTier>> HostTier::Create(const Options& options, TierId id) {
  // The allocator first: it validates the options cheaply before any memory is mapped.
  KVTIER_ASSIGN_OR_RETURN(
      SlabAllocator allocator,
      SlabAllocator::Create({.capacity_bytes = options.capacity_bytes,
                             .slab_bytes = options.slab_bytes,
                             .alignment = options.alignment,
                             .small_slot_max_bytes = options.small_slot_max_bytes}));
  HostArena::Options arena_options;
  arena_options.capacity_bytes = options.capacity_bytes;
  arena_options.name = options.name.empty() ? "kvtier-" + std::string(TierName(id)) : options.name;
  arena_options.try_huge_pages = options.try_huge_pages;
  arena_options.try_mlock = options.try_mlock;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<HostArena> arena, HostArena::Create(arena_options));
  return std::unique_ptr<HostTier>(new HostTier(id, std::move(arena), std::move(allocator)));
}

HostTier::HostTier(TierId id, std::unique_ptr<HostArena> arena, SlabAllocator allocator)
    : id_(id), arena_(std::move(arena)), allocator_(std::move(allocator)) {}

Result<Extent> HostTier::Allocate(uint64_t bytes) {
  MutexLock lock(mu_);
  return allocator_.Allocate(bytes);
}

void HostTier::Free(const Extent& extent) {
  Status status;
  {
    MutexLock lock(mu_);
    status = allocator_.Free(extent);
  }
  if (!status.ok()) invalid_frees_.fetch_add(1, std::memory_order_relaxed);
}

Status HostTier::Write(const Extent& extent, std::span<const std::byte> src) {
  if (src.size() > extent.length) {
    return InvalidArgument("write of " + std::to_string(src.size()) + " bytes into an extent of " +
                           std::to_string(extent.length));
  }
  if (!InArena(extent)) return InvalidArgument("write to an extent outside the host arena");
  // Nobody reads a block on the thread that stores it: write around the cache.
  if (!src.empty()) StreamCopy(arena_->base() + extent.offset, src.data(), src.size());
  return Status::Ok();
}

Status HostTier::Read(const Extent& extent, std::span<std::byte> dst) {
  if (dst.size() > extent.length) {
    return InvalidArgument("read of " + std::to_string(dst.size()) + " bytes from an extent of " +
                           std::to_string(extent.length));
  }
  if (!InArena(extent)) return InvalidArgument("read from an extent outside the host arena");
  if (!dst.empty()) std::memcpy(dst.data(), arena_->base() + extent.offset, dst.size());
  return Status::Ok();
}

std::byte* HostTier::Address(const Extent& extent) {
  return InArena(extent) ? arena_->base() + extent.offset : nullptr;
}

Result<PoolExport> HostTier::ExportForClients() {
  return PoolExport{
      .kind = PoolExportKind::kMemfd, .pool_bytes = arena_->size(), .fd = arena_->fd()};
}

TierStats HostTier::Stats() const {
  MutexLock lock(mu_);
  return allocator_.Stats();
}

bool HostTier::InArena(const Extent& extent) const {
  // Written to avoid overflow in offset + length for hostile values.
  return extent.offset <= arena_->size() && extent.length <= arena_->size() - extent.offset;
}

uint64_t HostTier::FootprintOf(uint64_t bytes) const {
  MutexLock lock(mu_);
  return allocator_.FootprintOf(bytes);
}

Extent HostTier::ReclaimUnit(const Extent& victim, uint64_t /*room_bytes*/) const {
  MutexLock lock(mu_);
  return allocator_.ReclaimUnit(victim);
}

}  // namespace kvtier::tiers
