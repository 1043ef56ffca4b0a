// FakeGpuTier: the GPU tier's stand-in on machines without a GPU, backed by host memory.
//
// Same allocator (SlabAllocator), same contract and same visible behaviour as GpuTier: Address()
// is nullptr, so the store moves bytes with Read/Write as it must for a real pool; DevicePointer()
// is a host address, which the client's fake copier (client/gpu) treats as a device pointer.
// Tests of the store, placement and the daemon run with it on CPU-only machines, and the shared
// tier suite (device_tier_test_suite.h) runs against both. It can also fail copies on demand
// (kDeviceError), as a real device might.
//
// The memory is a memfd mapped shared, so that the pool can be exported to other processes on
// the node as GpuTier's is over CUDA IPC (ExportForClients: kMemfd, the descriptor): a client
// that maps it sees the same bytes at the same offsets, and the server and client paths that
// share the pool run on CPU-only machines.
//
// Ownership: owns its memfd, its mapping (pages are allocated as they are touched) and its
// allocator. Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"
#include "tiers/gpu/device_tier.h"
#include "tiers/gpu/slab_pool.h"

namespace kvtier::tiers {

class FakeGpuTier final : public DeviceTier {
 public:
  // Uses capacity_bytes (required, > 0), slab_bytes and alignment of `options`; the others
  // describe a device and are ignored. Errors: kInvalidArgument for bad sizes, naming the key;
  // the translated errno when the memfd cannot be created, sized or mapped.
  static Result<std::unique_ptr<FakeGpuTier>> Create(const GpuTierOptions& options);
  ~FakeGpuTier() override;

  // kInvalidArgument when the copy does not fit the extent or the extent the pool; kDeviceError
  // when a failure was injected.
  Status Write(const Extent& extent, std::span<const std::byte> src) override;
  Status Read(const Extent& extent, std::span<std::byte> dst) override;

  void* DevicePointer(const Extent& extent) override;
  int device() const override { return -1; }
  void* pool_base() const override { return base_; }
  uint64_t pool_bytes() const override { return bytes_; }
  // kMemfd with the tier's descriptor (never fails).
  Result<PoolExport> ExportForClients() override;

  // The next `count` Read or Write calls fail with kDeviceError and copy nothing.
  void FailNextCopies(uint32_t count) { failures_.store(count, std::memory_order_relaxed); }

 private:
  FakeGpuTier(int fd, std::byte* base, uint64_t bytes, SlabAllocator allocator);
  bool ConsumeFailure();

  const int fd_;
  std::byte* const base_;
  const uint64_t bytes_;
  std::atomic<uint32_t> failures_{0};
};

}  // namespace kvtier::tiers
