#include "client/gpu/paged_layout.h"

#include <cstring>
#include <string>

namespace kvtier::client::gpu {

Status ValidatePagedLayout(const PagedKvLayout& layout) {
  if (layout.plane_bases.empty() || layout.plane_bases.size() > kMaxPagedPlanes) {
    return InvalidArgument("paged KV layout: " + std::to_string(layout.plane_bases.size()) +
                           " planes; expected 1 to " + std::to_string(kMaxPagedPlanes));
  }
  for (size_t i = 0; i < layout.plane_bases.size(); ++i) {
    if (layout.plane_bases[i] == nullptr) {
      return InvalidArgument("paged KV layout: plane " + std::to_string(i) + " has no base");
    }
  }
  if (layout.layer_block_bytes == 0 || layout.layer_block_bytes > layout.block_stride_bytes) {
    return InvalidArgument("paged KV layout: layer_block_bytes (" +
                           std::to_string(layout.layer_block_bytes) +
                           ") must be non-zero and at most block_stride_bytes (" +
                           std::to_string(layout.block_stride_bytes) + ")");
  }
  return Status::Ok();
}

void ReferenceGather(const PagedKvLayout& layout, uint64_t block_id, std::byte* dst) {
  for (size_t plane = 0; plane < layout.plane_bases.size(); ++plane) {
    std::memcpy(dst + plane * layout.layer_block_bytes, layout.BlockInPlane(plane, block_id),
                layout.layer_block_bytes);
  }
}

void ReferenceScatter(const std::byte* src, const PagedKvLayout& layout, uint64_t block_id) {
  for (size_t plane = 0; plane < layout.plane_bases.size(); ++plane) {
    std::memcpy(layout.BlockInPlane(plane, block_id), src + plane * layout.layer_block_bytes,
                layout.layer_block_bytes);
  }
}

}  // namespace kvtier::client::gpu
