// PagedKvLayout: where one block of an engine's paged KV cache lives, layer by layer.
//
// Engines keep the KV cache as one tensor (or one K and one V tensor) per layer, each an array of
// fixed-size pages ("blocks" of tokens_per_block tokens) indexed by block id. A kvtier block is
// the same token block across all layers, stored contiguously: the bytes of layer 0, then layer 1,
// and so on, each `layer_block_bytes` long. So the layout is: one base pointer per layer plane,
// the distance between consecutive blocks within a plane, and the bytes of one block in one plane.
//   vLLM (per layer [2, num_blocks, block_size, kv_heads, head_dim]): two planes per layer (K at
//     base, V at base + num_blocks * stride), stride = layer_block_bytes = block_size * kv_heads *
//     head_dim * element size; 64 planes for a 32-layer model.
//   FlashInfer-style (per layer [num_blocks, 2, block_size, ...]): one plane per layer,
//     stride = layer_block_bytes = both K and V of one block.
// A plane may have a stride larger than layer_block_bytes (padding, or a block of several
// interleaved caches). The daemon never interprets the bytes; the engine reads them back with the
// same layout.
//
// Gather copies block `id` into one contiguous buffer of block_bytes(); Scatter copies it back.
// The Reference* functions are the CPU definition of both (plain memcpy over host memory), used by
// the fake copier and as the oracle for the CUDA kernel (paged_copy_kernel.cu). Values and pure
// functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace kvtier::client::gpu {

// Layer planes one gather covers. The CUDA kernel receives the plane table by value as a kernel
// parameter (8 bytes per plane, within CUDA's 4 KiB parameter limit): 256 planes is 128 layers
// of K and V, above any model kvtier sizes for (Llama 3.1 405B has 126).
inline constexpr size_t kMaxPagedPlanes = 256;

struct PagedKvLayout {
  std::vector<void*> plane_bases;   // one per layer plane, in block order (device pointers)
  uint64_t block_stride_bytes = 0;  // from block b to block b + 1 within a plane
  uint64_t layer_block_bytes = 0;   // bytes of one block in one plane

  uint64_t block_bytes() const { return plane_bases.size() * layer_block_bytes; }
  // Where block `block_id` starts in plane `plane`.
  std::byte* BlockInPlane(size_t plane, uint64_t block_id) const {
    return static_cast<std::byte*>(plane_bases[plane]) + block_id * block_stride_bytes;
  }
};

// OK, or kInvalidArgument naming what is wrong: no planes or more than kMaxPagedPlanes, a null
// base, layer_block_bytes 0 or larger than block_stride_bytes (blocks would overlap).
Status ValidatePagedLayout(const PagedKvLayout& layout);

// Copies block `block_id` of `layout` into `dst` (block_bytes() long), plane by plane.
// Preconditions: the layout is valid and every pointer is host memory.
void ReferenceGather(const PagedKvLayout& layout, uint64_t block_id, std::byte* dst);
// The inverse: copies `src` (block_bytes() long) into block `block_id` of `layout`.
void ReferenceScatter(const std::byte* src, const PagedKvLayout& layout, uint64_t block_id);

}  // namespace kvtier::client::gpu
