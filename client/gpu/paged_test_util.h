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

// Shapes for the paged copy tests (the CPU replay of the CUDA path and the kernel itself), with
// the plane bases `base_offset` bytes past an aligned buffer and each block's contiguous buffer
// `flat_offset` bytes past one: every word width of the kernel and its fallback.
struct PagedCase {
  const char* name;
  PagedShape shape;
  size_t base_offset = 0;
  size_t flat_offset = 0;
};

inline constexpr PagedCase kPagedCopyCases[] = {
    // A 16-token Llama-8B block: 32 layers x K,V of 32 KiB, 16-byte words.
    {"llama8b_16_tokens",
     {.planes = 64, .blocks = 6, .stride_bytes = 32 << 10, .layer_block_bytes = 32 << 10}},
    {"words_of_8", {.planes = 3, .blocks = 5, .stride_bytes = 200, .layer_block_bytes = 200}, 0, 8},
    {"words_of_4", {.planes = 4, .blocks = 5, .stride_bytes = 100, .layer_block_bytes = 100}, 0, 4},
    // Lengths and strides that no word divides, buffers at odd offsets: the shifted fallback.
    {"padded_odd",
     {.planes = 5, .blocks = 7, .stride_bytes = 1003, .layer_block_bytes = 1000},
     0,
     1},
    {"shifted_planes",
     {.planes = 4, .blocks = 6, .stride_bytes = 512, .layer_block_bytes = 512},
     2,
     3},
    // Under one word per plane: head and tail bytes only.
    {"tiny", {.planes = 3, .blocks = 5, .stride_bytes = 3, .layer_block_bytes = 3}, 1, 0},
};

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
