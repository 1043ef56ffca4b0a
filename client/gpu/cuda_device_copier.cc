#include "client/gpu/cuda_device_copier.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "client/gpu/paged_copy_kernel.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/probe.h"

namespace kvtier::client::gpu {
namespace {

cudaMemcpyKind Kind(CopyDirection direction) {
  switch (direction) {
    case CopyDirection::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case CopyDirection::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CopyDirection::kDeviceToDevice:
      return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}

}  // namespace

Result<std::unique_ptr<CudaDeviceCopier>> CudaDeviceCopier::Create(
    int device, CudaDeviceCopierOptions options) {
  KVTIER_RETURN_IF_ERROR(cuda::ProbeDevice(device));
  KVTIER_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create(device));
  KVTIER_ASSIGN_OR_RETURN(cuda::Event caller_done,
                          cuda::Event::Create(device, {.blocking_sync = false}));
  return std::unique_ptr<CudaDeviceCopier>(
      new CudaDeviceCopier(device, options, std::move(stream), std::move(caller_done)));
}

Status CudaDeviceCopier::OrderAfter(const CallerStream& caller) {
  cuda::ScopedDevice scoped(device_);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  cuda::ClearLastError();
  cudaEvent_t event = caller.event;
  if (event == nullptr) {
    KVTIER_CUDA_RETURN_IF_ERROR(cudaEventRecord(caller_done_.get(), caller.stream),
                                "cudaEventRecord on the caller's stream");
    event = caller_done_.get();
  }
  KVTIER_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_.get(), event, 0),
                              "cudaStreamWaitEvent for the caller's work");
  return Status::Ok();
}

Status CudaDeviceCopier::Copy(void* dst, const void* src, size_t bytes, CopyDirection direction) {
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr || src == nullptr) return InvalidArgument("device copy with a null pointer");
  cuda::ScopedDevice scoped(device_);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  cuda::ClearLastError();
  KVTIER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, Kind(direction), stream_.get()),
                              "cudaMemcpyAsync");
  return Status::Ok();
}

Result<std::byte*> CudaDeviceCopier::Staging(size_t bytes) {
  if (staging_.size() < bytes) {
    // Queued kernels and copies may still use the old buffer.
    KVTIER_RETURN_IF_ERROR(stream_.Synchronize());
    staging_ = cuda::DeviceBuffer();
    KVTIER_ASSIGN_OR_RETURN(staging_, cuda::DeviceBuffer::Allocate(device_, bytes));
  }
  return staging_.get();
}

Status CudaDeviceCopier::CopyBlocks(const PagedKvLayout& layout,
                                    std::span<const PagedBlockCopy> entries, bool gather) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedBatch(layout, entries));
  if (entries.empty()) return Status::Ok();
  cuda::ScopedDevice scoped(device_);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  const uint64_t block_bytes = layout.block_bytes();
  const size_t staging_blocks =
      StagingBlocks(HostEntries(entries), block_bytes, options_.max_staging_bytes);
  std::byte* staging = nullptr;
  if (staging_blocks > 0) {
    KVTIER_ASSIGN_OR_RETURN(staging, Staging(staging_blocks * block_bytes));
  }
  const CopyDirection staging_direction =
      gather ? CopyDirection::kDeviceToHost : CopyDirection::kHostToDevice;
  return ForEachPagedLaunch(
      layout, entries, staging, staging_blocks, gather,
      [&](void* dst, const void* src) { return Copy(dst, src, block_bytes, staging_direction); },
      [&](const PagedCopyArgs& args) {
        return cuda::CudaStatus(
            LaunchPagedCopy(args, stream_.get()),
            gather ? "paged gather kernel launch" : "paged scatter kernel launch");
      });
}

Status CudaDeviceCopier::GatherBlocks(const PagedKvLayout& layout,
                                      std::span<const PagedBlockCopy> entries) {
  return CopyBlocks(layout, entries, /*gather=*/true);
}

Status CudaDeviceCopier::ScatterBlocks(std::span<const PagedBlockCopy> entries,
                                       const PagedKvLayout& layout) {
  return CopyBlocks(layout, entries, /*gather=*/false);
}

Status CudaDeviceCopier::Synchronize() { return stream_.Synchronize(); }

}  // namespace kvtier::client::gpu
