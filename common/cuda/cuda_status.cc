#include "common/cuda/cuda_status.h"

#include <string>

namespace kvtier::cuda {

Status CudaStatus(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return Status::Ok();
  std::string message(what);
  message += ": ";
  message += cudaGetErrorName(error);
  message += ": ";
  message += cudaGetErrorString(error);
  switch (error) {
    case cudaErrorMemoryAllocation:
      return Busy(std::move(message));
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
      return NotFound(std::move(message));
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorInvalidResourceHandle:
      return InvalidArgument(std::move(message));
    default:
      return DeviceError(std::move(message));
  }
}

}  // namespace kvtier::cuda
