// Whether this process can use CUDA, and if not, why: the reason the daemon shows in its stats
// ("no GPU tier: ...") and tests print when they skip.
//
// Available in every build; without CUDA (KVTIER_WITH_CUDA=OFF) the answers come from
// cuda_stub.cc. Thread-safe.
#pragma once

#include "common/status.h"

namespace kvtier::cuda {

// Whether this build has CUDA support (KVTIER_WITH_CUDA).
bool BuiltWithCuda();

// OK when CUDA device `device` exists and can be used. Otherwise the reason, phrased for a
// human ("built without CUDA (KVTIER_WITH_CUDA=OFF)", "no CUDA device found: ...", "CUDA device
// 3 not found: the machine has 2"): kRejected without CUDA support, kNotFound when there is no
// such device, kDeviceError when the driver is missing or broken.
Status ProbeDevice(int device);

}  // namespace kvtier::cuda
