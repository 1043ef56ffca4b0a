#include "client/gpu/fake_device_copier.h"

#include <cstring>
#include <string>
#include <utility>

namespace kvtier::client::gpu {

bool FakeDeviceCopier::ConsumeFailure() {
  if (failures_ == 0) return false;
  --failures_;
  return true;
}

Status FakeDeviceCopier::OrderAfter(const CallerStream& caller) {
  if (std::exchange(fail_order_after_, false)) {
    return DeviceError("fake device copier: injected ordering failure");
  }
  ++counters_.ordered_after;
  const void* name = caller.event != nullptr ? static_cast<const void*>(caller.event)
                                             : static_cast<const void*>(caller.stream);
  for (auto it = caller_work_.begin(); it != caller_work_.end();) {
    if (it->first != name) {
      ++it;
      continue;
    }
    it->second();
    it = caller_work_.erase(it);
  }
  return Status::Ok();
}

Status FakeDeviceCopier::Issue(std::function<void()> copy, const char* what) {
  if (deferred_) {
    queued_.push_back(std::move(copy));
  } else {
    copy();
  }
  if (failures_after_queueing_ == 0) return Status::Ok();
  --failures_after_queueing_;
  return DeviceError(std::string("fake device copier: injected ") + what +
                     " failure after queueing");
}

Status FakeDeviceCopier::Copy(void* dst, const void* src, size_t bytes, CopyDirection direction) {
  if (ConsumeFailure()) return DeviceError("fake device copier: injected copy failure");
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr || src == nullptr) return InvalidArgument("device copy with a null pointer");
  ++counters_.copies;
  if (direction == CopyDirection::kDeviceToDevice) ++counters_.device_to_device_copies;
  counters_.bytes += bytes;
  return Issue([=] { std::memcpy(dst, src, bytes); }, "copy");
}

Status FakeDeviceCopier::CopyBlocks(const PagedKvLayout& layout,
                                    std::span<const PagedBlockCopy> entries, bool gather) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedBatch(layout, entries));
  if (entries.empty()) return Status::Ok();
  if (ConsumeFailure()) {
    return DeviceError(std::string("fake device copier: injected ") +
                       (gather ? "gather" : "scatter") + " failure");
  }
  ++counters_.paged_batches;
  for (const PagedBlockCopy& entry : entries) {
    ++(gather ? counters_.gathers : counters_.scatters);
    if (!gather && entry.kind == MemoryKind::kDevice) ++counters_.device_scatters;
    counters_.bytes += layout.block_bytes();
  }
  std::vector<PagedBlockCopy> copies(entries.begin(), entries.end());
  return Issue(
      [layout, copies = std::move(copies), gather] {
        for (const PagedBlockCopy& entry : copies) {
          auto* contiguous = static_cast<std::byte*>(entry.contiguous);
          if (gather) {
            ReferenceGather(layout, entry.block_id, contiguous);
          } else {
            ReferenceScatter(contiguous, layout, entry.block_id);
          }
        }
      },
      gather ? "gather" : "scatter");
}

Status FakeDeviceCopier::GatherBlocks(const PagedKvLayout& layout,
                                      std::span<const PagedBlockCopy> entries) {
  return CopyBlocks(layout, entries, /*gather=*/true);
}

Status FakeDeviceCopier::ScatterBlocks(std::span<const PagedBlockCopy> entries,
                                       const PagedKvLayout& layout) {
  return CopyBlocks(layout, entries, /*gather=*/false);
}

Status FakeDeviceCopier::Synchronize() {
  // Everything queued runs, even when the synchronisation reports a failure: a stream's work is
  // over when cudaStreamSynchronize returns, whatever it says.
  for (std::function<void()>& copy : queued_) copy();
  queued_.clear();
  if (ConsumeFailure()) return DeviceError("fake device copier: injected synchronize failure");
  return Status::Ok();
}

}  // namespace kvtier::client::gpu
