// GpuPromotionPolicy: which host blocks are worth copying up into the GPU tier.
//
// The GPU pool is small (an eighth of the device by default) and every copy into it takes PCIe
// bandwidth from the engine that shares the device, so a block read once should not go there: it
// would push out a block that is read again. The store asks the policy on every lease of a host
// block (on the network threads, under the block's index shard lock: it must be cheap and touch
// nothing but the block's metadata). When the policy answers true, the block becomes a promotion
// candidate, which the GPU mover copies up later (Store::PromoteCandidates). Policies are small
// classes chosen by name in config (gpu.promotion).
//
// Thread safety: OnRead is const and may be called from any thread; it changes only the `meta` it
// is given, which the caller holds exclusively.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/index/block_index.h"

namespace kvtier::placement {

class GpuPromotionPolicy {
 public:
  virtual ~GpuPromotionPolicy() = default;
  virtual std::string_view name() const = 0;
  // Records one read, at `now_us`, of `meta`, a ready block in the host tier (its read window,
  // BlockMeta::window_*), and answers whether it should now move up into the GPU tier.
  virtual bool OnRead(index::BlockMeta& meta, uint64_t now_us) const = 0;
};

// The defaults come from the Mooncake conversation trace (bench/gpu_placement_bench.cc, a GPU tier
// an eighth of the host tier): 2 reads within 10 minutes serve 40% of the blocks read from the GPU
// at 0.18 host -> GPU copies per block read; promoting on every read serves 47% but copies 0.53
// blocks per read, three times the PCIe traffic, mostly blocks pushed out before their next read.
struct GpuPromotionOptions {
  // "reads": a block read `after_reads` times within `window_us` (see MakeGpuPromotionPolicy);
  // "off": nothing is promoted, the GPU tier stays empty.
  std::string policy = "reads";
  uint32_t after_reads = 2;  // 1 to 255
  uint64_t window_us = 600'000'000;
};

// Names accepted by MakeGpuPromotionPolicy, the default first.
std::vector<std::string_view> GpuPromotionPolicyNames();

// "reads": a window opens at a block's first read and lasts `window_us`; a read after it closed
// opens a new one (counting 1). The block qualifies once a window has counted `after_reads` reads,
// and keeps qualifying on every read of that window, so a candidate the mover had to skip (the
// block was leased at the time) is offered again by the next read. It is a tumbling window, not
// a sliding one: reads at 0, 0.9W and 1.1W with after_reads 3 do not qualify, which errs towards
// fewer copies and keeps the state at 9 bytes per block.
// kInvalidArgument naming the bad option for an unknown name, after_reads outside 1..255 or a
// zero window.
Result<std::unique_ptr<GpuPromotionPolicy>> MakeGpuPromotionPolicy(
    const GpuPromotionOptions& options);

}  // namespace kvtier::placement
