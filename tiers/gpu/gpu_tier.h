// GpuTier: the hot tier, a pool of device memory on one CUDA device carved into block slots.
//
// At creation the tier cudaMallocs one pool (options.capacity_bytes, or an eighth of the device's
// memory, at most half of its free memory) and hands out offsets in it with a SlabAllocator, as
// the host tier does with its arena.
// Write and Read copy between a host buffer and a slot with cudaMemcpyAsync on one of the tier's
// own streams ("copy lanes") and wait for that stream, so the caller's thread blocks only for its
// own copy and several copies run at once; a pinned host buffer (the registered host arena)
// copies at DMA speed, a pageable one goes through the driver's staging buffers. Device memory is
// not host-addressable: Address() is nullptr (DeviceTier). The pool can be exported whole over
// CUDA IPC (ExportIpc), so that a client on the node maps it once and copies blocks out
// device-to-device at pool_base-relative offsets (the extent offsets).
//
// Ownership: the tier owns the pool, the streams and the export, and frees them in its destructor.
// A client that imported the pool keeps a mapping of it; the daemon must keep the tier alive
// while clients may still use their imports (it lives as long as the daemon). A client that dies
// loses its import, never the pool.
//
// CUDA builds only (KVTIER_WITH_CUDA); use MakeGpuTier (gpu_tier_factory.h) to get a tier in any
// build. Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/cuda/cuda_handles.h"
#include "common/cuda/ipc.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "tiers/gpu/device_tier.h"
#include "tiers/gpu/slab_pool.h"

namespace kvtier::tiers {

class GpuTier final : public DeviceTier {
 public:
  // Probes the device, sizes and allocates the pool and creates the copy streams. Errors:
  // kInvalidArgument for bad options (naming the key); kNotFound when the device does not exist;
  // kBusy when the device has not that much free memory; kDeviceError for other CUDA failures.
  static Result<std::unique_ptr<GpuTier>> Create(const GpuTierOptions& options);
  ~GpuTier() override;

  // Host -> device. kInvalidArgument when src does not fit the extent or the extent the pool;
  // kDeviceError (or another CudaStatus code) when the copy fails: the slot's bytes are then
  // unspecified and the block must not be committed.
  Status Write(const Extent& extent, std::span<const std::byte> src) override;
  // Device -> host; errors as Write (dst's bytes are unspecified after a failure).
  Status Read(const Extent& extent, std::span<std::byte> dst) override;

  void* DevicePointer(const Extent& extent) override;
  int device() const override { return device_; }
  void* pool_base() const override { return buffer_.get(); }
  uint64_t pool_bytes() const override { return buffer_.size(); }
  // kCudaIpc, with ExportIpc()'s bytes.
  Result<PoolExport> ExportForClients() override;

  // The pool's CUDA IPC handle (common/cuda/ipc.h), made on first use and kept for the tier's
  // lifetime. An importer reads the block of extent e at import.base() + e.offset, under a lease.
  // Writes are complete when Write returns, so no event wait is needed for committed blocks.
  // Errors: CudaStatus codes of cudaIpcGetMemHandle / cudaIpcGetEventHandle.
  Result<std::string> ExportIpc();

 private:
  // One stream, used by one copy at a time.
  struct Lane {
    Mutex mu;
    cuda::Stream stream GUARDED_BY(mu);
  };

  GpuTier(int device, cuda::DeviceBuffer buffer, SlabAllocator allocator,
          std::vector<std::unique_ptr<Lane>> lanes);
  // Copies with cudaMemcpyAsync on a free lane and waits for it.
  Status Copy(void* dst, const void* src, size_t bytes, bool to_device);

  const int device_;
  cuda::DeviceBuffer buffer_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::atomic<uint32_t> next_lane_{0};
  Mutex export_mu_;
  std::unique_ptr<cuda::IpcExport> export_ GUARDED_BY(export_mu_);
};

}  // namespace kvtier::tiers
