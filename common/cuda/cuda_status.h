// CudaStatus: the one place where a CUDA runtime error (cudaError_t) becomes a kvtier Status.
//
// Every CUDA call in kvtier goes through CudaStatus (or KVTIER_CUDA_RETURN_IF_ERROR), so the codes
// mean the same everywhere: out of device or pinned memory is kBusy (free something, retry), no
// such device is kNotFound, a rejected argument is kInvalidArgument, everything else (a launch
// failure, a sticky context error, a driver mismatch) is kDeviceError. The message names the
// operation and carries CUDA's own name and text for the error.
//
// CUDA builds only (KVTIER_WITH_CUDA): this header includes the CUDA runtime API. Thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "common/status.h"

namespace kvtier::cuda {

// OK for cudaSuccess; otherwise the translated error, "what: cudaErrorX: text".
Status CudaStatus(cudaError_t error, std::string_view what);

// Forgets the calling thread's last CUDA error. A failed call (cudaHostRegister refused, an
// import of a dead exporter's handle) leaves its error behind, and a kernel launch can only learn
// its own outcome from cudaGetLastError: so every launch clears first, and a caller that handled
// a failure clears it too. Sticky errors (a corrupted context) cannot be cleared and show again.
inline void ClearLastError() { (void)cudaGetLastError(); }

}  // namespace kvtier::cuda

// Returns the translated error from the enclosing function when `call` does not succeed.
#define KVTIER_CUDA_RETURN_IF_ERROR(call, what)                  \
  do {                                                           \
    const cudaError_t _kvtier_cuda_err = (call);                 \
    if (_kvtier_cuda_err != cudaSuccess) {                       \
      return ::kvtier::cuda::CudaStatus(_kvtier_cuda_err, what); \
    }                                                            \
  } while (0)
