// FakeDeviceCopier: a DeviceCopier for machines without a GPU. "Device" memory is host memory,
// every call copies at once with memcpy (ReferenceGather / ReferenceScatter for paged layouts),
// and Synchronize only reports failures injected with FailNext. It counts what it was asked to
// do, so tests can check that a path issued the copies they expect.
//
// Two models of a GPU's asynchrony, for the tests of the callers' ordering:
//   - Work of the engine on its own stream that the "device" has not run yet (QueueCallerWork):
//     it runs when a copy is ordered after that stream or event (OrderAfter), as a GPU would run
//     it before the copies; a path that forgets OrderAfter copies the bytes from before it.
//   - Deferred copies (set_deferred): calls only queue their copies and Synchronize runs them, as
//     a CUDA stream would; in_flight() counts what is queued. FailNextAfterQueueing makes a call
//     queue its copy and then fail, as a kernel launch fails after its staging copy was queued.
//
// Thread safety: none, as DeviceCopier.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "client/gpu/device_copier.h"

namespace kvtier::client::gpu {

class FakeDeviceCopier final : public DeviceCopier {
 public:
  struct Counters {
    uint64_t copies = 0;
    uint64_t device_to_device_copies = 0;  // of `copies`: out of the GPU pool, say
    uint64_t gathers = 0;                  // blocks
    uint64_t scatters = 0;                 // blocks
    uint64_t device_scatters = 0;  // of `scatters`: from device memory rather than a host slot
    uint64_t paged_batches = 0;    // GatherBlocks and ScatterBlocks calls
    uint64_t bytes = 0;
    uint64_t ordered_after = 0;  // OrderAfter calls
  };

  bool fake() const override { return true; }
  int device() const override { return -1; }
  Status OrderAfter(const CallerStream& caller) override;
  Status Copy(void* dst, const void* src, size_t bytes, CopyDirection direction) override;
  Status GatherBlocks(const PagedKvLayout& layout,
                      std::span<const PagedBlockCopy> entries) override;
  Status ScatterBlocks(std::span<const PagedBlockCopy> entries,
                       const PagedKvLayout& layout) override;
  Status Synchronize() override;

  // The next `calls` calls (Copy, GatherBlocks, ScatterBlocks or Synchronize) fail with
  // kDeviceError and copy nothing.
  void FailNext(uint32_t calls) { failures_ = calls; }
  // The next `calls` calls to Copy, GatherBlocks or ScatterBlocks queue their copy, then fail with
  // kDeviceError (with set_deferred, the copy stays in flight until Synchronize).
  void FailNextAfterQueueing(uint32_t calls) { failures_after_queueing_ = calls; }
  // The next OrderAfter fails with kDeviceError.
  void FailNextOrderAfter() { fail_order_after_ = true; }
  // `work` stands for the engine's kernels queued on `stream_or_event` (a CallerStream's stream
  // or event, used only as a name): it runs at the first OrderAfter naming it.
  void QueueCallerWork(const void* stream_or_event, std::function<void()> work) {
    caller_work_.emplace_back(stream_or_event, std::move(work));
  }
  void set_deferred(bool deferred) { deferred_ = deferred; }
  // Copies queued and not yet run by Synchronize (always 0 unless deferred).
  size_t in_flight() const { return queued_.size(); }
  const Counters& counters() const { return counters_; }

 private:
  bool ConsumeFailure();
  Status CopyBlocks(const PagedKvLayout& layout, std::span<const PagedBlockCopy> entries,
                    bool gather);
  // Runs `copy` now, or queues it when deferred; then the injected failure after queueing, if any.
  Status Issue(std::function<void()> copy, const char* what);

  uint32_t failures_ = 0;
  uint32_t failures_after_queueing_ = 0;
  bool fail_order_after_ = false;
  bool deferred_ = false;
  std::vector<std::function<void()>> queued_;
  std::vector<std::pair<const void*, std::function<void()>>> caller_work_;
  Counters counters_;
};

}  // namespace kvtier::client::gpu
