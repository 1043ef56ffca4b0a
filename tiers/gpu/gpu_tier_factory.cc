#include "tiers/gpu/gpu_tier_factory.h"

#include <string>
#include <utility>

#include "common/cuda/probe.h"
#include "tiers/gpu/fake_gpu_tier.h"
#if KVTIER_WITH_CUDA
#include "tiers/gpu/gpu_tier.h"
#endif

namespace kvtier::tiers {
namespace {

Status NoTier(const Status& why) { return Status(why.code(), "no GPU tier: " + why.message()); }

template <typename T>
Result<std::unique_ptr<DeviceTier>> Upcast(Result<std::unique_ptr<T>> made) {
  if (!made.ok()) return NoTier(made.status());
  return std::unique_ptr<DeviceTier>(std::move(made).value());
}

}  // namespace

Result<std::unique_ptr<DeviceTier>> MakeGpuTier(const GpuTierOptions& options) {
  if (!options.enabled) return Rejected("no GPU tier: disabled in config");
  if (options.fake) return Upcast(FakeGpuTier::Create(options));
  // Without CUDA this is the stub's "built without CUDA" answer.
  if (Status probe = cuda::ProbeDevice(options.device); !probe.ok()) return NoTier(probe);
#if KVTIER_WITH_CUDA
  return Upcast(GpuTier::Create(options));
#else
  return Internal("no GPU tier: the CUDA stub reported a device");
#endif
}

}  // namespace kvtier::tiers
