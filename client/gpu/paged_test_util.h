// Paged KV layouts over one buffer, for the paged gather/scatter tests (CPU reference, fake
// copier, CUDA kernel) and the GPU benchmark: `planes` planes of `blocks` blocks each, laid out
// one plane after another, so the same offsets describe a host mirror and a device copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "client/gpu/paged_layout.h"

namespace kvtier::client::gpu::testing {

struct PagedShape {
  size_t planes = 0;
  uint64_t blocks = 0;
  uint64_t stride_bytes = 0;
  uint64_t layer_block_bytes = 0;
  uint64_t total_bytes() const { return planes * blocks * stride_bytes; }
};

inline PagedKvLayout LayoutOver(void* base, const PagedShape& shape) {
  PagedKvLayout layout;
  for (size_t p = 0; p < shape.planes; ++p) {
    layout.plane_bases.push_back(static_cast<std::byte*>(base) +
                                 p * shape.blocks * shape.stride_bytes);
  }
  layout.block_stride_bytes = shape.stride_bytes;
  layout.layer_block_bytes = shape.layer_block_bytes;
  return layout;
}

inline std::vector<std::byte> Bytes(size_t size, uint32_t seed) {
  std::vector<std::byte> out(size);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    out[i] = std::byte(static_cast<uint8_t>(x));
  }
  return out;
}

}  // namespace kvtier::client::gpu::testing
