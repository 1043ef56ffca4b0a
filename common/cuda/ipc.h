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
// frees or invalidates the exporter's memory. An IpcImport must be destroyed before the process's
// CUDA context is torn down.
//
// CUDA builds only (KVTIER_WITH_CUDA). Move-only; no internal locking (the handles themselves may
// be used from several threads, as CUDA allows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/cuda/cuda_handles.h"
#include "common/status.h"

namespace kvtier::cuda {

// Size of IpcExport::Serialize()'s output: magic, version, device, byte count, two CUDA handles.
inline constexpr size_t kIpcHandleBytes = 8 + 4 + 4 + 8 + 64 + 64;

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
  // Opens an export in this process, on the exporter's device. Errors: kInvalidArgument for bytes
  // that are not an export (wrong length, magic or version); kNotFound when the device does not
  // exist here; other CudaStatus codes (an export of a process that has exited fails here with
  // kInvalidArgument or kDeviceError).
  static Result<IpcImport> Open(std::string_view serialized);
  IpcImport() = default;
  ~IpcImport();
  IpcImport(IpcImport&& other) noexcept;
  IpcImport& operator=(IpcImport&& other) noexcept;
  IpcImport(const IpcImport&) = delete;
  IpcImport& operator=(const IpcImport&) = delete;

  std::byte* base() const { return base_; }
  size_t size() const { return bytes_; }
  int device() const { return device_; }
  // Makes `stream` wait (on the device) for the exporter's last RecordWrites.
  Status WaitForExporter(const Stream& stream) const { return event_.MakeStreamWait(stream); }

 private:
  void Reset();

  std::byte* base_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
  Event event_;
};

}  // namespace kvtier::cuda
