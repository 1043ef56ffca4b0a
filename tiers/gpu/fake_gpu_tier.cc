#include "tiers/gpu/fake_gpu_tier.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kvtier::tiers {

Result<std::unique_ptr<FakeGpuTier>> FakeGpuTier::Create(const GpuTierOptions& options) {
  if (options.capacity_bytes == 0) {
    return InvalidArgument("tiers.gpu capacity_bytes must be set (> 0) for the fake GPU tier");
  }
  KVTIER_ASSIGN_OR_RETURN(SlabAllocator allocator,
                          SlabAllocator::Create({.capacity_bytes = options.capacity_bytes,
                                                 .slab_bytes = options.slab_bytes,
                                                 .alignment = options.alignment}));
  // Private and unreserved: like a device pool it costs nothing until blocks are written.
  void* base = ::mmap(nullptr, options.capacity_bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return ErrnoStatus(errno, "fake GPU tier: mmap");
  return std::unique_ptr<FakeGpuTier>(
      new FakeGpuTier(static_cast<std::byte*>(base), options.capacity_bytes, std::move(allocator)));
}

FakeGpuTier::FakeGpuTier(std::byte* base, uint64_t bytes, SlabAllocator allocator)
    : DeviceTier(std::move(allocator)), base_(base), bytes_(bytes) {}

FakeGpuTier::~FakeGpuTier() { ::munmap(base_, bytes_); }

bool FakeGpuTier::ConsumeFailure() {
  uint32_t left = failures_.load(std::memory_order_relaxed);
  while (left > 0) {
    if (failures_.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

Status FakeGpuTier::Write(const Extent& extent, std::span<const std::byte> src) {
  KVTIER_RETURN_IF_ERROR(SlabPool::CheckCopy(extent, src.size(), bytes_, "write"));
  if (ConsumeFailure()) return DeviceError("fake GPU tier: injected write failure");
  if (!src.empty()) std::memcpy(base_ + extent.offset, src.data(), src.size());
  return Status::Ok();
}

Status FakeGpuTier::Read(const Extent& extent, std::span<std::byte> dst) {
  KVTIER_RETURN_IF_ERROR(SlabPool::CheckCopy(extent, dst.size(), bytes_, "read"));
  if (ConsumeFailure()) return DeviceError("fake GPU tier: injected read failure");
  if (!dst.empty()) std::memcpy(dst.data(), base_ + extent.offset, dst.size());
  return Status::Ok();
}

void* FakeGpuTier::DevicePointer(const Extent& extent) {
  return SlabPool::CheckCopy(extent, 0, bytes_, "").ok() ? base_ + extent.offset : nullptr;
}

}  // namespace kvtier::tiers
