#include "daemon/placement/gpu_promotion_policy.h"

#include <algorithm>

namespace kvtier::placement {
namespace {

class PromoteNever final : public GpuPromotionPolicy {
 public:
  std::string_view name() const override { return "off"; }
  bool OnRead(index::BlockMeta&, uint64_t) const override { return false; }
};

class PromoteAfterReads final : public GpuPromotionPolicy {
 public:
  PromoteAfterReads(uint8_t after_reads, uint64_t window_us)
      : after_reads_(after_reads), window_us_(window_us) {}
  std::string_view name() const override { return "reads"; }
  bool OnRead(index::BlockMeta& meta, uint64_t now_us) const override {
    // Time may appear to run backwards between threads that read the clock before taking the
    // shard lock; such a read counts in the current window.
    const bool window_open =
        meta.window_reads > 0 && now_us - std::min(now_us, meta.window_start_us) < window_us_;
    if (!window_open) {
      meta.window_start_us = now_us;
      meta.window_reads = 0;
    }
    if (meta.window_reads < UINT8_MAX) ++meta.window_reads;
    return meta.window_reads >= after_reads_;
  }

 private:
  const uint8_t after_reads_;
  const uint64_t window_us_;
};

}  // namespace

std::vector<std::string_view> GpuPromotionPolicyNames() { return {"reads", "off"}; }

Result<std::unique_ptr<GpuPromotionPolicy>> MakeGpuPromotionPolicy(
    const GpuPromotionOptions& options) {
  if (options.policy == "off") return std::unique_ptr<GpuPromotionPolicy>(new PromoteNever());
  if (options.policy != "reads") {
    return InvalidArgument("gpu.promotion: unknown policy '" + options.policy +
                           "'; known: reads, off");
  }
  if (options.after_reads < 1 || options.after_reads > UINT8_MAX) {
    return InvalidArgument("gpu.promote_after_reads: expected 1 to 255, got " +
                           std::to_string(options.after_reads));
  }
  if (options.window_us == 0) {
    return InvalidArgument("gpu.promote_window_ms: must be positive");
  }
  return std::unique_ptr<GpuPromotionPolicy>(
      new PromoteAfterReads(static_cast<uint8_t>(options.after_reads), options.window_us));
}

}  // namespace kvtier::placement
