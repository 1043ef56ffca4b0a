// DeviceCopier: the client's engine for moving bytes between an inference engine's GPU memory
// and host memory (the daemon's arena slots, as mapped by the client).
//
// Two implementations: CudaDeviceCopier (cuda_device_copier.h, CUDA builds only) queues
// cudaMemcpyAsync copies and the paged gather/scatter kernel on its own stream; FakeDeviceCopier
// (fake_device_copier.h, every build) does the same with memcpy, the "device pointers" being
// host pointers, so the client's GPU paths are tested on CPU-only machines. MakeDeviceCopier
// picks one.
//
// Calls queue work and may return before it is done; Synchronize waits for everything queued and
// reports the first failure. The copier's queue does not follow the engine's own CUDA work by
// itself: OrderAfter makes the copies queued after it wait for the engine's stream (or event), so
// that a put reads what the engine's kernels wrote and a get writes only once the engine's queued
// work on that memory is done. Memory passed to a call must stay valid and unchanged (sources) or
// untouched (destinations) until Synchronize returns. Errors: kInvalidArgument for a bad layout
// or null pointers; kDeviceError (or another translated CUDA code) for a failed launch or copy,
// after which the queued results must not be used.
//
// Thread safety: none; one copier per thread, like a Client. Copiers on different threads may
// share a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "client/gpu/paged_batch.h"
#include "client/gpu/paged_layout.h"
#include "common/status.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*

namespace kvtier::client::gpu {

// The engine's CUDA work that a transfer must come after. With `event` set, the copies wait for
// that event (recorded by the caller); otherwise for everything queued on `stream` so far (nullptr
// is the legacy default stream, which PyTorch's default stream is). Both belong to the copier's
// device. The host never blocks on them: the wait is queued on the device (cudaStreamWaitEvent).
struct CallerStream {
  CUstream_st* stream = nullptr;
  CUevent_st* event = nullptr;
};

enum class CopyDirection : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };

class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;

  // True for FakeDeviceCopier.
  virtual bool fake() const = 0;
  // The CUDA device the copier copies on; -1 for the fake copier.
  virtual int device() const = 0;
  // Makes every copy queued after this call wait for `caller`'s work (see CallerStream).
  // kInvalidArgument when the stream or event is not one of the copier's device.
  virtual Status OrderAfter(const CallerStream& caller) = 0;
  // Queues a copy of `bytes` from `src` to `dst`.
  virtual Status Copy(void* dst, const void* src, size_t bytes, CopyDirection direction) = 0;
  // Queues the gather of every entry's block of `layout` (device memory) into the entry's
  // contiguous buffer (layout.block_bytes() long, on the entry's `kind` side): the CUDA copier
  // makes one kernel launch per kKernelMaxBatch entries (paged_batch.h), not one per block.
  // kInvalidArgument (ValidatePagedBatch) before anything is queued; no entries: nothing to do.
  virtual Status GatherBlocks(const PagedKvLayout& layout,
                              std::span<const PagedBlockCopy> entries) = 0;
  // The inverse: queues the scatter of every entry's contiguous buffer into its block of `layout`.
  virtual Status ScatterBlocks(std::span<const PagedBlockCopy> entries,
                               const PagedKvLayout& layout) = 0;
  // One block: GatherBlocks / ScatterBlocks with one entry.
  Status Gather(const PagedKvLayout& layout, uint64_t block_id, void* dst, MemoryKind dst_kind) {
    const PagedBlockCopy entry{.block_id = block_id, .contiguous = dst, .kind = dst_kind};
    return GatherBlocks(layout, std::span<const PagedBlockCopy>(&entry, 1));
  }
  Status Scatter(const void* src, MemoryKind src_kind, const PagedKvLayout& layout,
                 uint64_t block_id) {
    const PagedBlockCopy entry{
        .block_id = block_id, .contiguous = const_cast<void*>(src), .kind = src_kind};
    return ScatterBlocks(std::span<const PagedBlockCopy>(&entry, 1), layout);
  }
  // Waits for everything queued; the first error of any of it.
  virtual Status Synchronize() = 0;
};

struct DeviceCopierOptions {
  bool fake = false;  // FakeDeviceCopier, in any build
  int device = 0;     // CUDA device of the engine's memory
};

// The copier `options` ask for. Errors: for the real copier, kRejected when built without CUDA,
// kNotFound when the device does not exist, other translated CUDA codes.
Result<std::unique_ptr<DeviceCopier>> MakeDeviceCopier(const DeviceCopierOptions& options);

}  // namespace kvtier::client::gpu
