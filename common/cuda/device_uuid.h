// DeviceUuid: a GPU's identity across processes. CUDA device ordinals are per process: they
// follow CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER), so "device 1" of kvtierd and "device 1" of
// an engine next to it may be different GPUs. Whatever names a device to another process (a CUDA
// IPC export) carries its UUID, the one nvidia-smi prints as GPU-xxxxxxxx-xxxx-xxxx-xxxx-
// xxxxxxxxxxxx, and the receiver finds its own ordinal for it.
//
// Plain values and pure functions, in every build (the CUDA side, DeviceUuidOf, is in ipc.cc).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace kvtier::cuda {

using DeviceUuid = std::array<uint8_t, 16>;

// "GPU-" and the 16 bytes in nvidia-smi's 8-4-4-4-12 hex grouping.
inline std::string FormatDeviceUuid(const DeviceUuid& uuid) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kDigits[uuid[i] >> 4];
    out += kDigits[uuid[i] & 15];
  }
  return out;
}

// The index in `visible` (the UUIDs of this process's devices, by ordinal) of `uuid`; -1 when
// this process does not see that GPU.
inline int OrdinalOfUuid(const DeviceUuid& uuid, std::span<const DeviceUuid> visible) {
  for (size_t i = 0; i < visible.size(); ++i) {
    if (visible[i] == uuid) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace kvtier::cuda
