#include "common/cuda/probe.h"

#include <cuda_runtime_api.h>

#include <string>

#include "common/cuda/cuda_status.h"

namespace kvtier::cuda {

bool BuiltWithCuda() { return true; }

Status ProbeDevice(int device) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorNoDevice || (error == cudaSuccess && count == 0)) {
    return NotFound("no CUDA device found");
  }
  if (error == cudaErrorInsufficientDriver) {
    // What a machine without an NVIDIA driver (or with one older than the toolkit) reports.
    return NotFound("no CUDA device found: " + CudaStatus(error, "cudaGetDeviceCount").message());
  }
  if (error != cudaSuccess) {
    return DeviceError(CudaStatus(error, "no usable CUDA driver: cudaGetDeviceCount").message());
  }
  if (device < 0 || device >= count) {
    return NotFound("CUDA device " + std::to_string(device) + " not found: the machine has " +
                    std::to_string(count));
  }
  return Status::Ok();
}

}  // namespace kvtier::cuda
