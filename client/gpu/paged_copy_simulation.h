// The CUDA copier's paged batch path (CudaDeviceCopier::GatherBlocks / ScatterBlocks) replayed on
// host memory, for the CPU tests: the copier's own walk of the batch (ForEachPagedLaunch,
// paged_batch.h) and the same per-thread code (PagedCopyThread), run for every thread of every
// launch in turn.
// Only the device is missing: memcpy stands for the staging DMA. Memory given to it must be
// readable up to the next multiple of 4 bytes past each range (the fallback reads whole aligned
// words, as the kernel does; GPU allocations always are).
#pragma once

#include <cstring>
#include <span>
#include <vector>

#include "client/gpu/paged_batch.h"
#include "client/gpu/paged_copy_plan.h"
#include "client/gpu/paged_layout.h"

namespace kvtier::client::gpu::testing {

inline void SimulateLaunch(const PagedCopyArgs& args) {
  for (uint32_t entry = 0; entry < args.entries; ++entry) {
    for (uint32_t plane = 0; plane < args.planes; ++plane) {
      for (uint32_t slice = 0; slice < args.slices; ++slice) {
        for (uint32_t thread = 0; thread < kKernelThreads; ++thread) {
          PagedCopyThread(args, slice, thread, plane, entry);
        }
      }
    }
  }
}

struct SimulatedBatch {
  std::vector<PagedCopyArgs> launches;  // as launched, for tests of the plan
};

// Gathers (or scatters) `entries` as CudaDeviceCopier would with `max_staging_bytes`.
inline SimulatedBatch SimulatePagedBatch(const PagedKvLayout& layout,
                                         std::span<const PagedBlockCopy> entries, bool gather,
                                         uint64_t max_staging_bytes) {
  SimulatedBatch batch;
  const uint64_t block_bytes = layout.block_bytes();
  const size_t staging_blocks = StagingBlocks(HostEntries(entries), block_bytes, max_staging_bytes);
  std::vector<std::byte> staging(staging_blocks * block_bytes + 16);
  const Status walked = ForEachPagedLaunch(
      layout, entries, staging.data(), staging_blocks, gather,
      [&](void* dst, const void* src) {
        std::memcpy(dst, src, block_bytes);
        return Status::Ok();
      },
      [&](const PagedCopyArgs& args) {
        batch.launches.push_back(args);
        SimulateLaunch(args);
        return Status::Ok();
      });
  (void)walked;  // memcpy and the replayed launch cannot fail
  return batch;
}

}  // namespace kvtier::client::gpu::testing
