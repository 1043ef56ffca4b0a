#include "tiers/gpu/gpu_tier.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <utility>

#include "common/cuda/cuda_status.h"
#include "common/cuda/probe.h"

namespace kvtier::tiers {
namespace {

// An eighth of the device's memory, at most half of what is free, rounded down to the alignment:
// the engine on the same GPU needs the rest for weights, activations and its own KV cache, and
// may start after the daemon (so free memory alone would be too generous on an idle device).
Result<uint64_t> AutoCapacity(int device, uint64_t alignment) {
  cuda::ScopedDevice scoped(device);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  size_t free_bytes = 0, total_bytes = 0;
  KVTIER_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return std::min<uint64_t>(total_bytes / 8, free_bytes / 2) & ~(alignment - 1);
}

}  // namespace

Result<std::unique_ptr<GpuTier>> GpuTier::Create(const GpuTierOptions& options) {
  KVTIER_RETURN_IF_ERROR(cuda::ProbeDevice(options.device));
  if (options.copy_lanes == 0) return InvalidArgument("tiers.gpu copy_lanes must be at least 1");
  uint64_t capacity = options.capacity_bytes;
  const bool alignment_valid =
      options.alignment != 0 && (options.alignment & (options.alignment - 1)) == 0;
  if (capacity == 0 && alignment_valid) {  // a bad alignment is reported by the allocator below
    KVTIER_ASSIGN_OR_RETURN(capacity, AutoCapacity(options.device, options.alignment));
  }
  // The allocator validates sizes before any device memory is taken.
  KVTIER_ASSIGN_OR_RETURN(SlabAllocator allocator,
                          SlabAllocator::Create({.capacity_bytes = capacity,
                                                 .slab_bytes = options.slab_bytes,
                                                 .alignment = options.alignment}));
  KVTIER_ASSIGN_OR_RETURN(cuda::DeviceBuffer buffer,
                          cuda::DeviceBuffer::Allocate(options.device, capacity));
  std::vector<std::unique_ptr<Lane>> lanes;
  for (uint32_t i = 0; i < options.copy_lanes; ++i) {
    KVTIER_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create(options.device));
    auto lane = std::make_unique<Lane>();
    MutexLock lock(lane->mu);
    lane->stream = std::move(stream);
    lanes.push_back(std::move(lane));
  }
  return std::unique_ptr<GpuTier>(
      new GpuTier(options.device, std::move(buffer), std::move(allocator), std::move(lanes)));
}

GpuTier::GpuTier(int device, cuda::DeviceBuffer buffer, SlabAllocator allocator,
                 std::vector<std::unique_ptr<Lane>> lanes)
    : DeviceTier(std::move(allocator)),
      device_(device),
      buffer_(std::move(buffer)),
      lanes_(std::move(lanes)) {}

// Members go in reverse order: the export, the streams, the device memory; the slot bookkeeping
// (the base class) last.
GpuTier::~GpuTier() = default;

Status GpuTier::Write(const Extent& extent, std::span<const std::byte> src) {
  KVTIER_RETURN_IF_ERROR(SlabPool::CheckCopy(extent, src.size(), pool_bytes(), "write"));
  if (src.empty()) return Status::Ok();
  return Copy(buffer_.get() + extent.offset, src.data(), src.size(), /*to_device=*/true);
}

Status GpuTier::Read(const Extent& extent, std::span<std::byte> dst) {
  KVTIER_RETURN_IF_ERROR(SlabPool::CheckCopy(extent, dst.size(), pool_bytes(), "read"));
  if (dst.empty()) return Status::Ok();
  return Copy(dst.data(), buffer_.get() + extent.offset, dst.size(), /*to_device=*/false);
}

Status GpuTier::Copy(void* dst, const void* src, size_t bytes, bool to_device) {
  Lane& lane = *lanes_[next_lane_.fetch_add(1, std::memory_order_relaxed) % lanes_.size()];
  MutexLock lock(lane.mu);
  // cudaMemcpyAsync on a stream of another device than the current one is an error, and the
  // calling thread's current device is whatever it last used.
  cuda::ScopedDevice scoped(device_);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  const char* what =
      to_device ? "GPU tier write: cudaMemcpyAsync" : "GPU tier read: cudaMemcpyAsync";
  KVTIER_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                      lane.stream.get()),
      what);
  return lane.stream.Synchronize();
}

void* GpuTier::DevicePointer(const Extent& extent) {
  return SlabPool::CheckCopy(extent, 0, pool_bytes(), "").ok() ? buffer_.get() + extent.offset
                                                               : nullptr;
}

Result<std::string> GpuTier::ExportIpc() {
  MutexLock lock(export_mu_);
  if (export_ == nullptr) {
    KVTIER_ASSIGN_OR_RETURN(cuda::IpcExport exported,
                            cuda::IpcExport::Create(device_, buffer_.get(), buffer_.size()));
    export_ = std::make_unique<cuda::IpcExport>(std::move(exported));
  }
  return export_->serialized();
}

Result<PoolExport> GpuTier::ExportForClients() {
  KVTIER_ASSIGN_OR_RETURN(std::string handle, ExportIpc());
  return PoolExport{.kind = PoolExportKind::kCudaIpc,
                    .pool_bytes = pool_bytes(),
                    .device = device_,
                    .ipc_handle = std::move(handle)};
}

}  // namespace kvtier::tiers
