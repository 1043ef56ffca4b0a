#include "common/cuda/ipc.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

#include "common/cuda/cuda_status.h"

namespace kvtier::cuda {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'T', 'I', 'P', 'C', '\0', '\0'};
constexpr uint32_t kVersion = 1;

static_assert(sizeof(cudaIpcMemHandle_t) == 64 && sizeof(cudaIpcEventHandle_t) == 64,
              "kIpcHandleBytes assumes 64-byte CUDA IPC handles");

// Fixed little-endian-as-in-memory layout: exporter and importer are on the same node.
struct Wire {
  char magic[8];
  uint32_t version;
  int32_t device;
  uint64_t bytes;
  cudaIpcMemHandle_t memory;
  cudaIpcEventHandle_t event;
};
static_assert(sizeof(Wire) == kIpcHandleBytes);

}  // namespace

Result<IpcExport> IpcExport::Create(int device, void* base, size_t bytes) {
  if (base == nullptr || bytes == 0) return InvalidArgument("IPC export of an empty allocation");
  ScopedDevice scoped(device);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  Wire wire{};
  std::memcpy(wire.magic, kMagic, sizeof(kMagic));
  wire.version = kVersion;
  wire.device = device;
  wire.bytes = bytes;
  KVTIER_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&wire.memory, base), "cudaIpcGetMemHandle");
  KVTIER_ASSIGN_OR_RETURN(Event event,
                          Event::Create(device, {.interprocess = true, .blocking_sync = false}));
  KVTIER_CUDA_RETURN_IF_ERROR(cudaIpcGetEventHandle(&wire.event, event.get()),
                              "cudaIpcGetEventHandle");
  // Recorded once up front so that an importer waiting before any RecordWrites returns at once.
  KVTIER_CUDA_RETURN_IF_ERROR(cudaEventRecord(event.get(), nullptr), "cudaEventRecord");
  IpcExport out;
  out.base_ = base;
  out.bytes_ = bytes;
  out.device_ = device;
  out.event_ = std::move(event);
  out.serialized_.assign(reinterpret_cast<const char*>(&wire), sizeof(wire));
  return out;
}

Result<IpcImport> IpcImport::Open(std::string_view serialized) {
  Wire wire;
  if (serialized.size() != sizeof(wire)) {
    return InvalidArgument("IPC handle of " + std::to_string(serialized.size()) +
                           " bytes; expected " + std::to_string(sizeof(wire)));
  }
  std::memcpy(&wire, serialized.data(), sizeof(wire));
  if (std::memcmp(wire.magic, kMagic, sizeof(kMagic)) != 0 || wire.version != kVersion) {
    return InvalidArgument("not a kvtier IPC handle (bad magic or version)");
  }
  ScopedDevice scoped(wire.device);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  IpcImport out;
  out.device_ = wire.device;
  void* base = nullptr;
  KVTIER_CUDA_RETURN_IF_ERROR(
      cudaIpcOpenMemHandle(&base, wire.memory, cudaIpcMemLazyEnablePeerAccess),
      "cudaIpcOpenMemHandle");
  out.base_ = static_cast<std::byte*>(base);
  out.bytes_ = wire.bytes;
  // From here `out` owns the mapping: an early return below closes it.
  cudaEvent_t event = nullptr;
  KVTIER_CUDA_RETURN_IF_ERROR(cudaIpcOpenEventHandle(&event, wire.event), "cudaIpcOpenEventHandle");
  out.event_ = Event::Adopt(event, wire.device);
  return out;
}

IpcImport::~IpcImport() { Reset(); }

IpcImport::IpcImport(IpcImport&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(other.device_),
      event_(std::move(other.event_)) {}

IpcImport& IpcImport::operator=(IpcImport&& other) noexcept {
  if (this != &other) {
    Reset();
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
    event_ = std::move(other.event_);
  }
  return *this;
}

void IpcImport::Reset() {
  event_ = Event();
  if (base_ == nullptr) return;
  ScopedDevice scoped(device_);
  (void)cudaIpcCloseMemHandle(std::exchange(base_, nullptr));
  bytes_ = 0;
}

}  // namespace kvtier::cuda
