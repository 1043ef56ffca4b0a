#include <utility>

#include "client/gpu/device_copier.h"
#include "client/gpu/fake_device_copier.h"
#include "common/cuda/probe.h"
#if KVTIER_WITH_CUDA
#include "client/gpu/cuda_device_copier.h"
#endif

namespace kvtier::client::gpu {

Result<std::unique_ptr<DeviceCopier>> MakeDeviceCopier(const DeviceCopierOptions& options) {
  if (options.fake) return std::unique_ptr<DeviceCopier>(std::make_unique<FakeDeviceCopier>());
#if KVTIER_WITH_CUDA
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<CudaDeviceCopier> copier,
                          CudaDeviceCopier::Create(options.device));
  return std::unique_ptr<DeviceCopier>(std::move(copier));
#else
  return cuda::ProbeDevice(options.device);  // the stub's "built without CUDA"
#endif
}

}  // namespace kvtier::client::gpu
