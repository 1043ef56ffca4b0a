// The CUDA kernel behind CudaDeviceCopier::GatherBlocks and ScatterBlocks for paged KV layouts
// (paged_layout.h): one launch moves up to kKernelMaxBatch blocks across all of their planes,
// between the planes and each block's contiguous device buffer. What a launch copies and how each
// thread does its share are in paged_copy_plan.h (shared with the CPU tests); the copier builds
// the arguments with FillPagedCopyArgs (paged_batch.h).
//
// CUDA builds only. The plain signature keeps kvtier's C++20 headers out of nvcc's way.
// Thread-safe (launches on the caller's stream).
#pragma once

#include <cuda_runtime_api.h>

#include "client/gpu/paged_copy_plan.h"

namespace kvtier::client::gpu {

// Queues the copy `args` describes on `stream`. cudaErrorInvalidValue, with nothing launched,
// when args.planes is not 1 to kKernelMaxPlanes, args.entries not 1 to kKernelMaxBatch,
// args.slices 0 or layer_block_bytes 0. Otherwise the launch's own error (a stale error of an
// earlier call is cleared before the launch); errors during the copy show at the next
// synchronisation.
cudaError_t LaunchPagedCopy(const PagedCopyArgs& args, cudaStream_t stream);

}  // namespace kvtier::client::gpu
