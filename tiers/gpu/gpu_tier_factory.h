// MakeGpuTier: the one way the daemon gets its GPU tier, in any build.
//
// It returns the real pool (GpuTier) when CUDA is built in, enabled and a device exists; the
// host-memory stand-in (FakeGpuTier) when options.fake is set; and otherwise a Status whose
// message says, for a human, why there is no GPU tier. The daemon keeps running without the
// tier and shows that message in its stats (`kvtier stats`, /metrics, INFO).
//
// Thread safety: may be called from any thread; the tier it returns is as DeviceTier describes.
#pragma once

#include <memory>

#include "common/status.h"
#include "tiers/gpu/device_tier.h"

namespace kvtier::tiers {

// The tier, or why there is none. Every message starts "no GPU tier: ":
//   kRejected  "no GPU tier: disabled in config"             options.enabled is false
//   kRejected  "no GPU tier: built without CUDA (...)"       KVTIER_WITH_CUDA was off
//   kNotFound  "no GPU tier: no CUDA device found[: ...]"    no device, or no driver
//   kNotFound  "no GPU tier: CUDA device N not found: ..."   options.device out of range
// and GpuTier::Create's / FakeGpuTier::Create's errors for bad options or a failed allocation
// (kInvalidArgument naming the key, kBusy when the device has not enough free memory,
// kDeviceError), also prefixed. The fake is made whenever options.fake and options.enabled are
// set, with or without CUDA.
Result<std::unique_ptr<DeviceTier>> MakeGpuTier(const GpuTierOptions& options);

}  // namespace kvtier::tiers
