#include "tiers/gpu/fake_gpu_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

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
  // A sparse memfd: like a device pool it costs nothing until blocks are written, and, unlike an
  // anonymous mapping, another process can map the same pages (ExportForClients).
  const int fd = ::memfd_create("kvtier-fake-gpu", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return ErrnoStatus(errno, "fake GPU tier: memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(options.capacity_bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "fake GPU tier: ftruncate");
  }
  // Clients get this fd (KVT.GPUATTACH): sealed, none of them can shrink the file under the
  // daemon's mapping (the daemon would die of SIGBUS touching the lost pages), as for the arena.
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "fake GPU tier: sealing the memfd");
  }
  void* base = ::mmap(nullptr, options.capacity_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "fake GPU tier: mmap");
  }
  return std::unique_ptr<FakeGpuTier>(new FakeGpuTier(
      fd, static_cast<std::byte*>(base), options.capacity_bytes, std::move(allocator)));
}

FakeGpuTier::FakeGpuTier(int fd, std::byte* base, uint64_t bytes, SlabAllocator allocator)
    : DeviceTier(std::move(allocator)), fd_(fd), base_(base), bytes_(bytes) {}

FakeGpuTier::~FakeGpuTier() {
  ::munmap(base_, bytes_);
  ::close(fd_);
}

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

Result<PoolExport> FakeGpuTier::ExportForClients() {
  return PoolExport{.kind = PoolExportKind::kMemfd, .pool_bytes = bytes_, .device = -1, .fd = fd_};
}

void* FakeGpuTier::DevicePointer(const Extent& extent) {
  return SlabPool::CheckCopy(extent, 0, bytes_, "").ok() ? base_ + extent.offset : nullptr;
}

}  // namespace kvtier::tiers
