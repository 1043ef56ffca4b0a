// The CUDA kernel behind CudaDeviceCopier::Gather and Scatter for paged KV layouts
// (paged_layout.h): one launch moves one block across all of its planes, between the planes and
// one contiguous device buffer.
//
// Grid: y = plane, x = slices of the plane's block bytes; each thread moves 16-byte words in a
// grid-stride loop when every address and the length are 16-byte aligned (the case for any real
// KV layout: fp16/bf16 heads of 64+ elements), single bytes otherwise. The plane table travels by
// value as a kernel parameter, so a launch needs no device-side table and no extra copy.
//
// CUDA builds only. The plain signature keeps kvtier headers out of nvcc's way. Thread-safe
// (launches on the caller's stream).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvtier::client::gpu {

// The size of the plane table passed by value; equal to kMaxPagedPlanes (paged_layout.h, which
// nvcc does not compile: kvtier headers are C++20, the kernel is built as C++17).
inline constexpr uint32_t kKernelMaxPlanes = 256;

// Queues the copy of block (byte offset `block_offset_bytes` in every plane) between the planes
// and `contiguous` (device memory, planes * layer_block_bytes long): planes -> contiguous when
// `gather`, the reverse otherwise. Preconditions: 1 <= planes <= kKernelMaxPlanes. Returns the
// launch's own error (a stale error of an earlier call is cleared before the launch); errors
// during the copy show at the next synchronisation.
cudaError_t LaunchPagedCopy(void* const* plane_bases, uint32_t planes, uint64_t block_offset_bytes,
                            uint64_t layer_block_bytes, void* contiguous, bool gather,
                            cudaStream_t stream);

}  // namespace kvtier::client::gpu
