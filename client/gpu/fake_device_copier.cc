#include "client/gpu/fake_device_copier.h"

#include <cstring>

namespace kvtier::client::gpu {

bool FakeDeviceCopier::ConsumeFailure() {
  if (failures_ == 0) return false;
  --failures_;
  return true;
}

Status FakeDeviceCopier::Copy(void* dst, const void* src, size_t bytes, CopyDirection direction) {
  if (ConsumeFailure()) return DeviceError("fake device copier: injected copy failure");
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr || src == nullptr) return InvalidArgument("device copy with a null pointer");
  std::memcpy(dst, src, bytes);
  ++counters_.copies;
  if (direction == CopyDirection::kDeviceToDevice) ++counters_.device_to_device_copies;
  counters_.bytes += bytes;
  return Status::Ok();
}

Status FakeDeviceCopier::Gather(const PagedKvLayout& layout, uint64_t block_id, void* dst,
                                MemoryKind dst_kind) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedLayout(layout));
  if (dst == nullptr) return InvalidArgument("paged gather into a null buffer");
  if (ConsumeFailure()) return DeviceError("fake device copier: injected gather failure");
  ReferenceGather(layout, block_id, static_cast<std::byte*>(dst));
  ++counters_.gathers;
  counters_.bytes += layout.block_bytes();
  return Status::Ok();
}

Status FakeDeviceCopier::Scatter(const void* src, MemoryKind src_kind, const PagedKvLayout& layout,
                                 uint64_t block_id) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedLayout(layout));
  if (src == nullptr) return InvalidArgument("paged scatter from a null buffer");
  if (ConsumeFailure()) return DeviceError("fake device copier: injected scatter failure");
  ReferenceScatter(static_cast<const std::byte*>(src), layout, block_id);
  ++counters_.scatters;
  if (src_kind == MemoryKind::kDevice) ++counters_.device_scatters;
  counters_.bytes += layout.block_bytes();
  return Status::Ok();
}

Status FakeDeviceCopier::Synchronize() {
  if (ConsumeFailure()) return DeviceError("fake device copier: injected synchronize failure");
  return Status::Ok();
}

}  // namespace kvtier::client::gpu
