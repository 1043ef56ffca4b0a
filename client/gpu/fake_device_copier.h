// FakeDeviceCopier: a DeviceCopier for machines without a GPU. "Device" memory is host memory,
// every call copies at once with memcpy (ReferenceGather / ReferenceScatter for paged layouts),
// and Synchronize only reports failures injected with FailNext. It counts what it was asked to
// do, so tests can check that a path issued the copies they expect.
//
// Thread safety: none, as DeviceCopier.
#pragma once

#include <cstdint>

#include "client/gpu/device_copier.h"

namespace kvtier::client::gpu {

class FakeDeviceCopier final : public DeviceCopier {
 public:
  struct Counters {
    uint64_t copies = 0;
    uint64_t device_to_device_copies = 0;  // of `copies`: out of the GPU pool, say
    uint64_t gathers = 0;
    uint64_t scatters = 0;
    uint64_t device_scatters = 0;  // of `scatters`: from device memory rather than a host slot
    uint64_t bytes = 0;
  };

  bool fake() const override { return true; }
  Status Copy(void* dst, const void* src, size_t bytes, CopyDirection direction) override;
  Status Gather(const PagedKvLayout& layout, uint64_t block_id, void* dst,
                MemoryKind dst_kind) override;
  Status Scatter(const void* src, MemoryKind src_kind, const PagedKvLayout& layout,
                 uint64_t block_id) override;
  Status Synchronize() override;

  // The next `calls` calls (Copy, Gather, Scatter or Synchronize) fail with kDeviceError and
  // copy nothing.
  void FailNext(uint32_t calls) { failures_ = calls; }
  const Counters& counters() const { return counters_; }

 private:
  bool ConsumeFailure();

  uint32_t failures_ = 0;
  Counters counters_;
};

}  // namespace kvtier::client::gpu
