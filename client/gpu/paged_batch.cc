#include "client/gpu/paged_batch.h"

#include <algorithm>
#include <limits>
#include <string>

namespace kvtier::client::gpu {

static_assert(kKernelMaxPlanes == kMaxPagedPlanes, "the kernel's plane table must fit any layout");

Status ValidatePagedBatch(const PagedKvLayout& layout, std::span<const PagedBlockCopy> entries) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedLayout(layout));
  const uint64_t max_id =
      (std::numeric_limits<uint64_t>::max() - layout.layer_block_bytes) / layout.block_stride_bytes;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].contiguous == nullptr) {
      return InvalidArgument("paged copy: entry " + std::to_string(i) + " has a null buffer");
    }
    if (entries[i].block_id > max_id) {
      return InvalidArgument("paged copy: entry " + std::to_string(i) + " names block " +
                             std::to_string(entries[i].block_id) +
                             ", beyond any addressable block of the layout");
    }
  }
  return Status::Ok();
}

PagedLaunchRange NextPagedLaunch(std::span<const PagedBlockCopy> entries, size_t first,
                                 size_t staging_blocks) {
  staging_blocks = std::max<size_t>(staging_blocks, 1);  // never a launch of no entries
  PagedLaunchRange range{.first = first};
  while (first + range.count < entries.size() && range.count < kKernelMaxBatch) {
    const bool host = entries[first + range.count].kind == MemoryKind::kHost;
    if (host && range.staged == staging_blocks) break;
    range.staged += host ? 1 : 0;
    ++range.count;
  }
  return range;
}

size_t HostEntries(std::span<const PagedBlockCopy> entries) {
  return std::count_if(entries.begin(), entries.end(),
                       [](const PagedBlockCopy& e) { return e.kind == MemoryKind::kHost; });
}

size_t StagingBlocks(size_t host_entries, uint64_t block_bytes, uint64_t max_staging_bytes) {
  if (host_entries == 0) return 0;
  const uint64_t fit = std::max<uint64_t>(1, max_staging_bytes / block_bytes);
  return static_cast<size_t>(std::min<uint64_t>(host_entries, fit));
}

void FillPagedCopyArgs(const PagedKvLayout& layout, std::span<const PagedBlockCopy> entries,
                       const PagedLaunchRange& range, std::byte* staging, bool gather,
                       PagedCopyArgs& args) {
  args.planes = static_cast<uint32_t>(layout.plane_bases.size());
  for (uint32_t p = 0; p < args.planes; ++p) {
    args.plane_bases[p] = static_cast<unsigned char*>(layout.plane_bases[p]);
  }
  args.entries = static_cast<uint32_t>(range.count);
  size_t staged = 0;
  for (size_t i = 0; i < range.count; ++i) {
    const PagedBlockCopy& entry = entries[range.first + i];
    args.block_offsets[i] = entry.block_id * layout.block_stride_bytes;
    void* contiguous = entry.kind == MemoryKind::kDevice
                           ? entry.contiguous
                           : StagingPlace(staging, staged++, layout.block_bytes());
    args.contiguous[i] = static_cast<unsigned char*>(contiguous);
  }
  args.layer_block_bytes = layout.layer_block_bytes;
  args.gather = gather;
  args.word_bytes = ChooseWordBytes(args);
  args.slices = PlanSlices(args.layer_block_bytes, args.word_bytes,
                           static_cast<uint64_t>(args.planes) * args.entries);
}

}  // namespace kvtier::client::gpu
