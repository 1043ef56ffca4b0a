#include "client/gpu/cuda_device_copier.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "client/gpu/paged_copy_kernel.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/probe.h"

namespace kvtier::client::gpu {
namespace {

static_assert(kKernelMaxPlanes == kMaxPagedPlanes, "the kernel's plane table must fit any layout");

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

Result<std::unique_ptr<CudaDeviceCopier>> CudaDeviceCopier::Create(int device) {
  KVTIER_RETURN_IF_ERROR(cuda::ProbeDevice(device));
  KVTIER_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create(device));
  KVTIER_ASSIGN_OR_RETURN(cuda::Event caller_done,
                          cuda::Event::Create(device, {.blocking_sync = false}));
  return std::unique_ptr<CudaDeviceCopier>(
      new CudaDeviceCopier(device, std::move(stream), std::move(caller_done)));
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

Status CudaDeviceCopier::Launch(const PagedKvLayout& layout, uint64_t block_id, void* contiguous,
                                bool gather) {
  KVTIER_CUDA_RETURN_IF_ERROR(
      LaunchPagedCopy(layout.plane_bases.data(), static_cast<uint32_t>(layout.plane_bases.size()),
                      block_id * layout.block_stride_bytes, layout.layer_block_bytes, contiguous,
                      gather, stream_.get()),
      gather ? "paged gather kernel launch" : "paged scatter kernel launch");
  return Status::Ok();
}

Status CudaDeviceCopier::Gather(const PagedKvLayout& layout, uint64_t block_id, void* dst,
                                MemoryKind dst_kind) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedLayout(layout));
  if (dst == nullptr) return InvalidArgument("paged gather into a null buffer");
  cuda::ScopedDevice scoped(device_);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  if (dst_kind == MemoryKind::kDevice) return Launch(layout, block_id, dst, /*gather=*/true);
  KVTIER_ASSIGN_OR_RETURN(std::byte * staging, Staging(layout.block_bytes()));
  KVTIER_RETURN_IF_ERROR(Launch(layout, block_id, staging, /*gather=*/true));
  return Copy(dst, staging, layout.block_bytes(), CopyDirection::kDeviceToHost);
}

Status CudaDeviceCopier::Scatter(const void* src, MemoryKind src_kind, const PagedKvLayout& layout,
                                 uint64_t block_id) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedLayout(layout));
  if (src == nullptr) return InvalidArgument("paged scatter from a null buffer");
  cuda::ScopedDevice scoped(device_);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  if (src_kind == MemoryKind::kDevice) {
    return Launch(layout, block_id, const_cast<void*>(src), /*gather=*/false);
  }
  KVTIER_ASSIGN_OR_RETURN(std::byte * staging, Staging(layout.block_bytes()));
  KVTIER_RETURN_IF_ERROR(Copy(staging, src, layout.block_bytes(), CopyDirection::kHostToDevice));
  return Launch(layout, block_id, staging, /*gather=*/false);
}

Status CudaDeviceCopier::Synchronize() { return stream_.Synchronize(); }

}  // namespace kvtier::client::gpu
