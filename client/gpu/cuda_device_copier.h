// CudaDeviceCopier: the DeviceCopier that really moves bytes to and from a GPU, on one
// non-blocking CUDA stream of its own.
//
// Copy is cudaMemcpyAsync. GatherBlocks and ScatterBlocks launch the paged copy kernel
// (paged_copy_kernel.h) once per kKernelMaxBatch blocks, all planes of each (paged_batch.h cuts
// the batch). A block whose contiguous side is host memory (an arena slot) goes through a device
// staging buffer of the copier, and one cudaMemcpyAsync moves the whole block across PCIe,
// because one DMA transfer of a block is far faster than a copy per plane and than a kernel
// reading or writing host memory. The staging buffer holds as many blocks as fit in
// max_staging_bytes (at least one); a launch stages no more than that, and everything is queued
// on the one stream, so the next launch reuses the places in order without synchronising. Host
// memory runs at DMA speed only when pinned: pin the client's arena mapping once
// (device_transfer.h, PinArena).
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

struct CudaDeviceCopierOptions {
  // The most device memory the staging buffer grows to (64 MiB: 32 blocks of 2 MiB, enough to
  // keep PCIe busy while kernels run), or one block when that is larger.
  uint64_t max_staging_bytes = uint64_t{64} << 20;
};

class CudaDeviceCopier final : public DeviceCopier {
 public:
  // Errors: kNotFound when `device` does not exist; other translated CUDA codes.
  static Result<std::unique_ptr<CudaDeviceCopier>> Create(int device,
                                                          CudaDeviceCopierOptions options = {});

  bool fake() const override { return false; }
  int device() const override { return device_; }
  Status OrderAfter(const CallerStream& caller) override;
  Status Copy(void* dst, const void* src, size_t bytes, CopyDirection direction) override;
  Status GatherBlocks(const PagedKvLayout& layout,
                      std::span<const PagedBlockCopy> entries) override;
  Status ScatterBlocks(std::span<const PagedBlockCopy> entries,
                       const PagedKvLayout& layout) override;
  Status Synchronize() override;

  // The copier's stream, for callers that order their own work after its copies.
  CUstream_st* stream() const { return stream_.get(); }

 private:
  CudaDeviceCopier(int device, CudaDeviceCopierOptions options, cuda::Stream stream,
                   cuda::Event caller_done)
      : device_(device),
        options_(options),
        stream_(std::move(stream)),
        caller_done_(std::move(caller_done)) {}
  // A staging buffer of at least `bytes`; waits for queued work before replacing a smaller one.
  Result<std::byte*> Staging(size_t bytes);
  // Queues the batch launch by launch (ForEachPagedLaunch): staging copies in, kernel, copies out.
  Status CopyBlocks(const PagedKvLayout& layout, std::span<const PagedBlockCopy> entries,
                    bool gather);

  const int device_;
  const CudaDeviceCopierOptions options_;
  cuda::Stream stream_;
  cuda::Event caller_done_;  // recorded on the caller's stream by OrderAfter
  cuda::DeviceBuffer staging_;
};

}  // namespace kvtier::client::gpu
