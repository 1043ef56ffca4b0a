// Batches of paged block copies: the blocks one DeviceCopier::GatherBlocks or ScatterBlocks call
// moves, checked once and cut into kernel launches (paged_copy_plan.h) on the host, in every
// build, so the CPU-side logic of the CUDA copier is tested without a GPU.
//
// An entry is one block of a paged layout and its contiguous side: device memory (a buffer of the
// engine, the daemon's GPU pool) that the kernel reads or writes directly, or host memory (an
// arena slot) that moves through the copier's device staging buffer with one DMA copy per block.
// A launch takes consecutive entries: at most kKernelMaxBatch, and no more host entries than the
// staging buffer has block-sized places; the places are reused by the next launch in stream
// order. Values and pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "client/gpu/paged_copy_plan.h"
#include "client/gpu/paged_layout.h"
#include "common/status.h"

namespace kvtier::client::gpu {

// Which side a contiguous buffer of a gather or scatter is on.
enum class MemoryKind : uint8_t { kHost, kDevice };

struct PagedBlockCopy {
  uint64_t block_id = 0;       // the block of the layout
  void* contiguous = nullptr;  // its contiguous side, layout.block_bytes() long
  MemoryKind kind = MemoryKind::kHost;
};

// OK, or kInvalidArgument naming the problem: a bad layout (ValidatePagedLayout), an entry with
// no contiguous buffer, or a block id whose bytes lie beyond 2^64.
Status ValidatePagedBatch(const PagedKvLayout& layout, std::span<const PagedBlockCopy> entries);

// Entries [first, first + count) go in one launch; `staged` of them are host entries.
struct PagedLaunchRange {
  size_t first = 0;
  size_t count = 0;
  size_t staged = 0;
};

// The launch that starts at entry `first` (< entries.size()), with room for `staging_blocks`
// host entries (0 counts as 1): at least one entry.
PagedLaunchRange NextPagedLaunch(std::span<const PagedBlockCopy> entries, size_t first,
                                 size_t staging_blocks);

// Host entries of the batch, and the staging places the copier needs: all of them when they fit
// in `max_staging_bytes`, else as many as fit, and at least one.
size_t HostEntries(std::span<const PagedBlockCopy> entries);
size_t StagingBlocks(size_t host_entries, uint64_t block_bytes, uint64_t max_staging_bytes);

// The kernel's parameter for `range`: host entries use the staging places in order
// (staging + i * block_bytes for the i-th host entry of the range), device entries their own
// buffer. Preconditions: the batch is valid; `staging` is non-null when range.staged > 0.
void FillPagedCopyArgs(const PagedKvLayout& layout, std::span<const PagedBlockCopy> entries,
                       const PagedLaunchRange& range, std::byte* staging, bool gather,
                       PagedCopyArgs& args);

// Where the i-th host entry of a launch is staged.
inline std::byte* StagingPlace(std::byte* staging, size_t i, uint64_t block_bytes) {
  return staging + i * block_bytes;
}

// Walks a valid batch launch by launch (NextPagedLaunch with `staging_blocks` places at
// `staging`), in the order the CUDA copier queues it: for a scatter the host entries' bytes into
// their staging places, then the launch; for a gather the launch, then the staging places out to
// the host entries. `stage(void* dst, const void* src)` copies one block of layout.block_bytes();
// `launch(const PagedCopyArgs&)` runs one launch; both return a Status, and the first error ends
// the walk. CudaDeviceCopier and the CPU replay (paged_copy_simulation.h) both walk with it, so
// the replay's tests check the copier's own sequence.
template <typename Stage, typename Launch>
Status ForEachPagedLaunch(const PagedKvLayout& layout, std::span<const PagedBlockCopy> entries,
                          std::byte* staging, size_t staging_blocks, bool gather, Stage&& stage,
                          Launch&& launch) {
  const uint64_t block_bytes = layout.block_bytes();
  const auto stage_range = [&](const PagedLaunchRange& range) -> Status {
    size_t staged = 0;
    for (size_t i = range.first; i < range.first + range.count; ++i) {
      if (entries[i].kind != MemoryKind::kHost) continue;
      std::byte* place = StagingPlace(staging, staged++, block_bytes);
      KVTIER_RETURN_IF_ERROR(gather ? stage(entries[i].contiguous, place)
                                    : stage(place, entries[i].contiguous));
    }
    return Status::Ok();
  };
  for (size_t first = 0; first < entries.size();) {
    const PagedLaunchRange range = NextPagedLaunch(entries, first, staging_blocks);
    if (!gather) KVTIER_RETURN_IF_ERROR(stage_range(range));
    PagedCopyArgs args;
    FillPagedCopyArgs(layout, entries, range, staging, gather, args);
    KVTIER_RETURN_IF_ERROR(launch(args));
    if (gather) KVTIER_RETURN_IF_ERROR(stage_range(range));
    first += range.count;
  }
  return Status::Ok();
}

}  // namespace kvtier::client::gpu
