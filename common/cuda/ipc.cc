#include "common/cuda/ipc.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda/cuda_status.h"

namespace kvtier::cuda {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'T', 'I', 'P', 'C', '\0', '\0'};
// 2: the device's UUID; version 1 named the device by the exporter's ordinal only.
constexpr uint32_t kVersion = 2;

static_assert(sizeof(cudaIpcMemHandle_t) == 64 && sizeof(cudaIpcEventHandle_t) == 64,
              "kIpcHandleBytes assumes 64-byte CUDA IPC handles");

// Fixed little-endian-as-in-memory layout: exporter and importer are on the same node.
struct Wire {
  char magic[8];
  uint32_t version;
  int32_t device;  // the exporter's ordinal, for messages: ordinals differ between processes
  uint64_t bytes;
  uint8_t uuid[16];
  cudaIpcMemHandle_t memory;
  cudaIpcEventHandle_t event;
};
static_assert(sizeof(Wire) == kIpcHandleBytes);

}  // namespace

Result<DeviceUuid> DeviceUuidOf(int device) {
  cudaDeviceProp prop{};
  KVTIER_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device),
                              "cudaGetDeviceProperties(" + std::to_string(device) + ")");
  DeviceUuid uuid;
  std::memcpy(uuid.data(), prop.uuid.bytes, uuid.size());
  return uuid;
}

Result<int> OrdinalOf(const DeviceUuid& uuid) {
  int count = 0;
  KVTIER_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  std::vector<DeviceUuid> visible;
  for (int i = 0; i < count; ++i) {
    KVTIER_ASSIGN_OR_RETURN(DeviceUuid one, DeviceUuidOf(i));
    visible.push_back(one);
  }
  const int ordinal = OrdinalOfUuid(uuid, visible);
  if (ordinal < 0) {
    return NotFound("GPU " + FormatDeviceUuid(uuid) + " is not visible in this process (" +
                    std::to_string(count) + " visible; CUDA_VISIBLE_DEVICES may hide it)");
  }
  return ordinal;
}

Result<IpcExport> IpcExport::Create(int device, void* base, size_t bytes) {
  if (base == nullptr || bytes == 0) return InvalidArgument("IPC export of an empty allocation");
  ScopedDevice scoped(device);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  Wire wire{};
  std::memcpy(wire.magic, kMagic, sizeof(kMagic));
  wire.version = kVersion;
  wire.device = device;
  wire.bytes = bytes;
  KVTIER_ASSIGN_OR_RETURN(DeviceUuid uuid, DeviceUuidOf(device));
  std::memcpy(wire.uuid, uuid.data(), uuid.size());
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

Result<IpcImport> IpcImport::Open(std::string_view serialized, int device) {
  Result<IpcImport> opened = OpenOrFail(serialized, device);
  if (!opened.ok()) ClearLastError();  // handled here: the next launch must not see it
  return opened;
}

Result<IpcImport> IpcImport::OpenOrFail(std::string_view serialized, int device) {
  Wire wire;
  if (serialized.size() != sizeof(wire)) {
    return InvalidArgument("IPC handle of " + std::to_string(serialized.size()) +
                           " bytes; expected " + std::to_string(sizeof(wire)));
  }
  std::memcpy(&wire, serialized.data(), sizeof(wire));
  if (std::memcmp(wire.magic, kMagic, sizeof(kMagic)) != 0 || wire.version != kVersion) {
    return InvalidArgument("not a kvtier IPC handle (bad magic or version)");
  }
  DeviceUuid uuid;
  std::memcpy(uuid.data(), wire.uuid, uuid.size());
  Result<int> memory_device = OrdinalOf(uuid);
  if (!memory_device.ok()) {
    return Status(memory_device.status().code(), "CUDA IPC import of the exporter's device " +
                                                     std::to_string(wire.device) + ": " +
                                                     memory_device.status().message());
  }
  if (device < 0) device = *memory_device;
  ScopedDevice scoped(device);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  IpcImport out;
  out.device_ = device;
  out.memory_device_ = *memory_device;
  void* base = nullptr;
  KVTIER_CUDA_RETURN_IF_ERROR(
      cudaIpcOpenMemHandle(&base, wire.memory, cudaIpcMemLazyEnablePeerAccess),
      "cudaIpcOpenMemHandle");
  out.base_ = static_cast<std::byte*>(base);
  out.bytes_ = wire.bytes;
  // From here `out` owns the mapping: an early return below closes it.
  cudaEvent_t event = nullptr;
  KVTIER_CUDA_RETURN_IF_ERROR(cudaIpcOpenEventHandle(&event, wire.event), "cudaIpcOpenEventHandle");
  out.event_ = Event::Adopt(event, device);
  return out;
}

IpcImport::~IpcImport() { Reset(); }

IpcImport::IpcImport(IpcImport&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(other.device_),
      memory_device_(other.memory_device_),
      event_(std::move(other.event_)) {}

IpcImport& IpcImport::operator=(IpcImport&& other) noexcept {
  if (this != &other) {
    Reset();
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
    memory_device_ = other.memory_device_;
    event_ = std::move(other.event_);
  }
  return *this;
}

void IpcImport::Reset() {
  if (base_ == nullptr) {
    event_ = Event();
    return;
  }
  ScopedDevice scoped(device_);
  event_ = Event();
  (void)cudaIpcCloseMemHandle(std::exchange(base_, nullptr));
  bytes_ = 0;
  // Closing is how an importer lets go after the exporter has exited (kvtierd freed its pool at
  // shutdown), when the driver may refuse the event's destruction or the close; there is nothing
  // to do about it, and the process's next launch must not take it for its own (cuda_status.h).
  ClearLastError();
}

}  // namespace kvtier::cuda
