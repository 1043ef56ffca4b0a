#include "common/cuda/pinned_host_range.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "common/cuda/cuda_status.h"
#include "common/cuda/probe.h"

namespace kvtier::cuda {

PinnedHostRange PinnedHostRange::Register(void* base, size_t bytes, const Options& options) {
  PinnedHostRange range;
  if (base == nullptr || bytes == 0) {
    range.status_ = InvalidArgument("cudaHostRegister: empty range");
    return range;
  }
  // cudaHostRegister initialises the CUDA context; probing first gives a clearer reason on a
  // machine without a device than the registration's own error would.
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    range.status_ = ProbeDevice(0);
    return range;
  }
  unsigned flags = cudaHostRegisterDefault;
  if (options.portable) flags |= cudaHostRegisterPortable;
  if (options.mapped) flags |= cudaHostRegisterMapped;
  range.status_ = CudaStatus(cudaHostRegister(base, bytes, flags),
                             "cudaHostRegister(" + std::to_string(bytes) + " bytes)");
  if (!range.status_.ok()) {
    ClearLastError();  // handled here: the next launch of the process must not see it
    return range;
  }
  range.base_ = base;
  range.bytes_ = bytes;
  if (options.mapped) {
    void* device_pointer = nullptr;
    if (cudaHostGetDevicePointer(&device_pointer, base, 0) == cudaSuccess) {
      range.device_pointer_ = device_pointer;
    }
  }
  return range;
}

PinnedHostRange::~PinnedHostRange() { Reset(); }

PinnedHostRange::PinnedHostRange(PinnedHostRange&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_pointer_(std::exchange(other.device_pointer_, nullptr)),
      status_(std::exchange(other.status_, Rejected("moved from"))) {}

PinnedHostRange& PinnedHostRange::operator=(PinnedHostRange&& other) noexcept {
  if (this != &other) {
    Reset();
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_pointer_ = std::exchange(other.device_pointer_, nullptr);
    status_ = std::exchange(other.status_, Rejected("moved from"));
  }
  return *this;
}

void PinnedHostRange::Reset() {
  if (base_ == nullptr) return;
  (void)cudaHostUnregister(std::exchange(base_, nullptr));
  bytes_ = 0;
  device_pointer_ = nullptr;
  status_ = Rejected("unregistered");
}

}  // namespace kvtier::cuda
