// SlabPool: the allocator half shared by GpuTier and FakeGpuTier: a SlabAllocator under a mutex,
// the bounds check of extents against the pool, and the invalid-free counter.
//
// Thread safety: every method may be called from any thread; the mutex is held for bookkeeping
// only, never during a copy.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/thread_annotations.h"
#include "tiers/slab_allocator.h"

namespace kvtier::tiers {

class SlabPool {
 public:
  explicit SlabPool(SlabAllocator allocator) : allocator_(std::move(allocator)) {}

  Result<Extent> Allocate(uint64_t bytes) {
    MutexLock lock(mu_);
    return allocator_.Allocate(bytes);
  }
  void Free(const Extent& extent) {
    Status status;
    {
      MutexLock lock(mu_);
      status = allocator_.Free(extent);
    }
    if (!status.ok()) invalid_frees_.fetch_add(1, std::memory_order_relaxed);
  }
  TierStats Stats() const {
    MutexLock lock(mu_);
    return allocator_.Stats();
  }
  uint64_t FootprintOf(uint64_t bytes) const {
    MutexLock lock(mu_);
    return allocator_.FootprintOf(bytes);
  }
  Extent ReclaimUnit(const Extent& extent) const {
    MutexLock lock(mu_);
    return allocator_.ReclaimUnit(extent);
  }
  uint64_t invalid_free_count() const { return invalid_frees_.load(std::memory_order_relaxed); }

  // OK when a copy of `bytes` into or out of `extent` stays inside the extent and the extent
  // inside a pool of `pool_bytes`; otherwise kInvalidArgument naming `what` ("write", "read").
  static Status CheckCopy(const Extent& extent, uint64_t bytes, uint64_t pool_bytes,
                          const char* what) {
    if (bytes > extent.length) {
      return InvalidArgument(std::string(what) + " of " + std::to_string(bytes) +
                             " bytes with an extent of " + std::to_string(extent.length));
    }
    // Written to avoid overflow in offset + length for hostile values.
    if (extent.offset > pool_bytes || extent.length > pool_bytes - extent.offset) {
      return InvalidArgument(std::string(what) + " with an extent outside the GPU pool");
    }
    return Status::Ok();
  }

 private:
  mutable Mutex mu_;
  SlabAllocator allocator_ GUARDED_BY(mu_);
  std::atomic<uint64_t> invalid_frees_{0};
};

}  // namespace kvtier::tiers
