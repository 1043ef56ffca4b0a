// The CUDA copier's paged batch path (CudaDeviceCopier::GatherBlocks / ScatterBlocks) replayed on
// host memory, for the CPU tests: the same cut into launches and staging places (paged_batch.h)
// and the same per-thread code (PagedCopyThread), run for every thread of every launch in turn.
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
  for (size_t first = 0; first < entries.size();) {
    const PagedLaunchRange range = NextPagedLaunch(entries, first, staging_blocks);
    const auto stage = [&](bool in) {
      size_t staged = 0;
      for (size_t i = range.first; i < range.first + range.count; ++i) {
        if (entries[i].kind != MemoryKind::kHost) continue;
        std::byte* place = StagingPlace(staging.data(), staged++, block_bytes);
        auto* contiguous = static_cast<std::byte*>(entries[i].contiguous);
        if (in) {
          std::memcpy(place, contiguous, block_bytes);
        } else {
          std::memcpy(contiguous, place, block_bytes);
        }
      }
    };
    if (!gather) stage(true);
    PagedCopyArgs& args = batch.launches.emplace_back();
    FillPagedCopyArgs(layout, entries, range, staging.data(), gather, args);
    SimulateLaunch(args);
    if (gather) stage(false);
    first += range.count;
  }
  return batch;
}

}  // namespace kvtier::client::gpu::testing
