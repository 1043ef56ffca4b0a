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

// Which side a contiguous buffer of a gather or scatter is on.
enum class MemoryKind : uint8_t { kHost, kDevice };

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
  // Queues a gather of block `block_id` of `layout` (device memory) into the contiguous `dst`
  // (layout.block_bytes() long, on the `dst_kind` side).
  virtual Status Gather(const PagedKvLayout& layout, uint64_t block_id, void* dst,
                        MemoryKind dst_kind) = 0;
  // Queues a scatter of the contiguous `src` into block `block_id` of `layout`.
  virtual Status Scatter(const void* src, MemoryKind src_kind, const PagedKvLayout& layout,
                         uint64_t block_id) = 0;
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
