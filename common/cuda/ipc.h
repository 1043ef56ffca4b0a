// CUDA IPC: one device allocation shared between processes on the same node.
//
// The exporter (the daemon, for its GPU pool) makes an IpcExport of an allocation it owns: a
// cudaIpcGetMemHandle for the memory plus an interprocess event (cudaIpcGetEventHandle) for
// ordering. Serialize() gives a small opaque byte string to send over the control socket. The
// importer (a client) passes those bytes to IpcImport::Open, which maps the same physical memory
// into its own address space (cudaIpcOpenMemHandle) and opens the event; it copies out of base()
// device-to-device. Before reading bytes the exporter wrote asynchronously, the importer calls
// WaitForExporter on its stream: the exporter calls RecordWrites on the stream that wrote them.
// An exporter whose writes are synchronous (GpuTier) needs no event: its commit, sent over the
// socket after the copy returned, orders them.
//
// Lifetimes: the export does not own the memory; the exporter keeps the allocation alive while
// any importer may use it (the daemon's pool lives as long as the daemon). Closing an import
// (IpcImport's destructor, or the importer's death, which the driver treats as a close) never
// frees or invalidates the exporter's memory; it may come after the exporter has exited, and
// leaves no CUDA error behind either way. An IpcImport must be destroyed before the process's
// CUDA context is torn down.
//
// Devices: the export names the exporter's GPU by UUID (device_uuid.h), never by ordinal, since
// the two processes may number their GPUs differently (CUDA_VISIBLE_DEVICES). The importer opens
// the export on a device of its own choosing (the one its copies run on; the memory is reached
// over peer access when that is another GPU), and fails clearly when it cannot see the exporter's
// GPU at all.
//
// CUDA builds only (KVTIER_WITH_CUDA). Move-only; no internal locking (the handles themselves may
// be used from several threads, as CUDA allows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/cuda/cuda_handles.h"
#include "common/cuda/device_uuid.h"
#include "common/status.h"

namespace kvtier::cuda {

// Size of IpcExport::Serialize()'s output: magic, version, the exporter's device ordinal (for
// messages only), byte count, the device's UUID, two CUDA handles.
inline constexpr size_t kIpcHandleBytes = 8 + 4 + 4 + 8 + 16 + 64 + 64;

// The UUID of this process's device `device`. Errors: CudaStatus codes.
Result<DeviceUuid> DeviceUuidOf(int device);
// This process's ordinal of the GPU `uuid`. kNotFound, naming the UUID, when it does not see it.
Result<int> OrdinalOf(const DeviceUuid& uuid);

class IpcExport {
 public:
  // Exports the allocation starting at `base` (a pointer cudaMalloc returned, not one inside an
  // allocation: CUDA maps whole allocations) of `bytes`, on `device`. Errors: kInvalidArgument
  // for a null base or 0 bytes, or memory CUDA cannot export (cudaMallocManaged, host memory);
  // other CudaStatus codes.
  static Result<IpcExport> Create(int device, void* base, size_t bytes);
  IpcExport() = default;
  IpcExport(IpcExport&&) noexcept = default;
  IpcExport& operator=(IpcExport&&) noexcept = default;

  // The bytes an importer passes to IpcImport::Open (kIpcHandleBytes long).
  const std::string& serialized() const { return serialized_; }
  void* base() const { return base_; }
  size_t size() const { return bytes_; }
  int device() const { return device_; }
  // Records the export's event on `stream`, after the writes queued on it: an importer that
  // calls WaitForExporter afterwards sees them.
  Status RecordWrites(const Stream& stream) { return event_.Record(stream); }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
  Event event_;
  std::string serialized_;
};

class IpcImport {
 public:
  // Opens an export in this process on `device` (this process's ordinal), or with -1 on the
  // exporter's GPU as this process numbers it. Errors: kInvalidArgument for bytes that are not an
  // export (wrong length, magic or version); kNotFound when this process does not see the
  // exporter's GPU (the message names its UUID) or `device` does not exist; other CudaStatus codes
  // (an export of a process that has exited fails here with kInvalidArgument or kDeviceError).
  // A failure leaves no CUDA error behind for the next launch.
  static Result<IpcImport> Open(std::string_view serialized, int device = -1);
  IpcImport() = default;
  ~IpcImport();
  IpcImport(IpcImport&& other) noexcept;
  IpcImport& operator=(IpcImport&& other) noexcept;
  IpcImport(const IpcImport&) = delete;
  IpcImport& operator=(const IpcImport&) = delete;

  std::byte* base() const { return base_; }
  size_t size() const { return bytes_; }
  // The device the import was opened on (copies run there).
  int device() const { return device_; }
  // This process's ordinal of the exporter's GPU, where the memory lies.
  int memory_device() const { return memory_device_; }
  // Makes `stream` wait (on the device) for the exporter's last RecordWrites.
  Status WaitForExporter(const Stream& stream) const { return event_.MakeStreamWait(stream); }

 private:
  static Result<IpcImport> OpenOrFail(std::string_view serialized, int device);
  void Reset();

  std::byte* base_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
  int memory_device_ = -1;
  Event event_;
};

}  // namespace kvtier::cuda
