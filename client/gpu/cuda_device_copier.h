// CudaDeviceCopier: the DeviceCopier that really moves bytes to and from a GPU, on one
// non-blocking CUDA stream of its own.
//
// Copy is cudaMemcpyAsync. Gather and Scatter launch the paged copy kernel (paged_copy_kernel.h),
// one launch per block covering all planes; when the contiguous side is host memory (an arena
// slot) the kernel works on a device staging buffer of the copier and one cudaMemcpyAsync moves
// the whole block across PCIe, because one DMA transfer of a block is far faster than a copy per
// plane and than a kernel reading or writing host memory. Everything is queued on the one stream,
// so the staging buffer is reused in order without further synchronisation. Host memory runs at
// DMA speed only when pinned: pin the client's arena mapping once (device_transfer.h, PinArena).
//
// OrderAfter records the copier's own event on the caller's stream (or takes the caller's event)
// and makes the copier's stream wait for it, so the engine's kernels and the copies stay ordered
// without the host waiting. Every launch checks its own error only: an error left behind by an
// earlier CUDA call of the process (a refused cudaHostRegister, a failed import) is cleared first.
//
// Ownership: owns its stream, its ordering event and staging buffer (grown to the largest block
// seen, after a synchronisation). CUDA builds only. Thread safety: none, as DeviceCopier.
#pragma once

#include <memory>

#include "client/gpu/device_copier.h"
#include "common/cuda/cuda_handles.h"

namespace kvtier::client::gpu {

class CudaDeviceCopier final : public DeviceCopier {
 public:
  // Errors: kNotFound when `device` does not exist; other translated CUDA codes.
  static Result<std::unique_ptr<CudaDeviceCopier>> Create(int device);

  bool fake() const override { return false; }
  int device() const override { return device_; }
  Status OrderAfter(const CallerStream& caller) override;
  Status Copy(void* dst, const void* src, size_t bytes, CopyDirection direction) override;
  Status Gather(const PagedKvLayout& layout, uint64_t block_id, void* dst,
                MemoryKind dst_kind) override;
  Status Scatter(const void* src, MemoryKind src_kind, const PagedKvLayout& layout,
                 uint64_t block_id) override;
  Status Synchronize() override;

  // The copier's stream, for callers that order their own work after its copies.
  CUstream_st* stream() const { return stream_.get(); }

 private:
  CudaDeviceCopier(int device, cuda::Stream stream, cuda::Event caller_done)
      : device_(device), stream_(std::move(stream)), caller_done_(std::move(caller_done)) {}
  // A staging buffer of at least `bytes`; waits for queued work before replacing a smaller one.
  Result<std::byte*> Staging(size_t bytes);
  Status Launch(const PagedKvLayout& layout, uint64_t block_id, void* contiguous, bool gather);

  const int device_;
  cuda::Stream stream_;
  cuda::Event caller_done_;  // recorded on the caller's stream by OrderAfter
  cuda::DeviceBuffer staging_;
};

}  // namespace kvtier::client::gpu
