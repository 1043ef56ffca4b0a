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

Status CudaDeviceCopier::CopyRange(const PagedKvLayout& layout,
                                   std::span<const PagedBlockCopy> entries,
                                   const PagedLaunchRange& range, std::byte* staging, bool gather) {
  const uint64_t block_bytes = layout.block_bytes();
  const auto staging_copies = [&](CopyDirection direction) -> Status {
    size_t staged = 0;
    for (size_t i = range.first; i < range.first + range.count; ++i) {
      if (entries[i].kind != MemoryKind::kHost) continue;
      std::byte* place = StagingPlace(staging, staged++, block_bytes);
      KVTIER_RETURN_IF_ERROR(direction == CopyDirection::kHostToDevice
                                 ? Copy(place, entries[i].contiguous, block_bytes, direction)
                                 : Copy(entries[i].contiguous, place, block_bytes, direction));
    }
    return Status::Ok();
  };
  if (!gather) KVTIER_RETURN_IF_ERROR(staging_copies(CopyDirection::kHostToDevice));
  PagedCopyArgs args;
  FillPagedCopyArgs(layout, entries, range, staging, gather, args);
  KVTIER_CUDA_RETURN_IF_ERROR(
      LaunchPagedCopy(args, stream_.get()),
      gather ? "paged gather kernel launch" : "paged scatter kernel launch");
  if (gather) KVTIER_RETURN_IF_ERROR(staging_copies(CopyDirection::kDeviceToHost));
  return Status::Ok();
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
  for (size_t first = 0; first < entries.size();) {
    const PagedLaunchRange range = NextPagedLaunch(entries, first, staging_blocks);
    KVTIER_RETURN_IF_ERROR(CopyRange(layout, entries, range, staging, gather));
    first += range.count;
  }
  return Status::Ok();
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
