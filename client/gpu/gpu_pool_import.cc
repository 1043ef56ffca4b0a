#include "client/gpu/gpu_pool_import.h"

#include <string>
#include <utility>

#if KVTIER_WITH_CUDA
#include "common/cuda/ipc.h"
#endif

namespace kvtier::client::gpu {

struct GpuPoolImport::CudaImport {
#if KVTIER_WITH_CUDA
  cuda::IpcImport import;
#endif
};

GpuPoolImport::GpuPoolImport() = default;
GpuPoolImport::~GpuPoolImport() = default;

GpuPoolImport::GpuPoolImport(GpuPoolImport&& other) noexcept
    : memfd_(std::move(other.memfd_)),
      cuda_(std::move(other.cuda_)),
      base_(std::exchange(other.base_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      device_(std::exchange(other.device_, -1)),
      fake_(std::exchange(other.fake_, false)) {}

GpuPoolImport& GpuPoolImport::operator=(GpuPoolImport&& other) noexcept {
  if (this != &other) {
    memfd_ = std::move(other.memfd_);
    cuda_ = std::move(other.cuda_);
    base_ = std::exchange(other.base_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    device_ = std::exchange(other.device_, -1);
    fake_ = std::exchange(other.fake_, false);
  }
  return *this;
}

Result<GpuPoolImport> GpuPoolImport::Map(GpuPoolExport exported, int device) {
  GpuPoolImport out;
  if (exported.kind == "memfd") {
    Result<SharedArena> mapped = SharedArena::Map(std::move(exported.fd), exported.pool_bytes);
    if (!mapped.ok()) {
      return Status(mapped.status().code(), "GPU pool: " + mapped.status().message());
    }
    out.memfd_ = std::move(mapped).value();
    out.base_ = out.memfd_.base();
    out.size_bytes_ = out.memfd_.size_bytes();
    out.fake_ = true;
    return out;
  }
  if (exported.kind != "cuda-ipc") {
    return InvalidArgument("GPU pool: unknown kind '" + exported.kind + "'");
  }
#if KVTIER_WITH_CUDA
  Result<cuda::IpcImport> opened = cuda::IpcImport::Open(exported.handle, device);
  if (!opened.ok()) {
    return Status(opened.status().code(), "GPU pool: " + opened.status().message());
  }
  if (opened->size() != exported.pool_bytes) {
    return InvalidArgument("GPU pool: the daemon announced " + std::to_string(exported.pool_bytes) +
                           " bytes but the handle maps " + std::to_string(opened->size()));
  }
  out.cuda_ = std::make_unique<CudaImport>(CudaImport{std::move(opened).value()});
  out.base_ = out.cuda_->import.base();
  out.size_bytes_ = out.cuda_->import.size();
  out.device_ = out.cuda_->import.device();
  return out;
#else
  (void)device;
  return Rejected(
      "GPU pool: the daemon exports it over CUDA IPC, and this client was built "
      "without CUDA (KVTIER_WITH_CUDA=OFF)");
#endif
}

std::byte* GpuPoolImport::Slice(uint64_t offset, uint64_t length) const {
  if (base_ == nullptr || offset > size_bytes_ || length > size_bytes_ - offset) return nullptr;
  return base_ + offset;
}

Result<GpuPoolImport> AttachGpuPool(Client& client, int device) {
  KVTIER_ASSIGN_OR_RETURN(GpuPoolExport exported, client.AttachGpuPool());
  Result<GpuPoolImport> import = GpuPoolImport::Map(std::move(exported), device);
  // A pool this process cannot map must not stay attached: the daemon would go on leasing blocks
  // in it and counting this client's reads toward promoting blocks there. Best effort: the
  // mapping's error is the one to report.
  if (!import.ok()) (void)client.DetachGpuPool();
  return import;
}

}  // namespace kvtier::client::gpu
