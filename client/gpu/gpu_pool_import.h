// GpuPoolImport: this process's mapping of the daemon's GPU pool, from which GetToDevice and
// GetToPaged (device_transfer.h) copy leased GPU blocks device-to-device, with no trip through
// host memory.
//
// AttachGpuPool sends KVT.GPUATTACH on a client's connection and maps what the daemon hands out:
// a CUDA IPC export of the real pool (cuda::IpcImport, CUDA builds only), or the memfd of the
// fake pool that CPU-only daemons run (mmap; its "device" bytes are host memory, which
// FakeDeviceCopier treats as device memory). From then on the daemon's KVT.ACQUIRE on that
// connection leases GPU blocks too, at offsets into the pool: a block lies at
// Slice(offset, length). The bytes are shared with the daemon and every other importer; leases,
// not this class, say when they may be read. Blocks are only read through an import: the daemon
// writes them, and its commit is ordered before the lease by the socket.
//
// Lifetimes: the import owns its mapping and unmaps (closes) it on destruction, which never
// touches the daemon's pool; a process that dies loses its mapping the same way. The daemon keeps
// the pool for as long as it runs, and at shutdown waits for its importers, for at most
// gpu.detach_timeout_ms: once it is stopping, every call on an attached connection fails with
// kShuttingDown ("-SHUTDOWN ... close the GPU pool import"). On that error destroy the import,
// then send KVT.GPUDETACH (Client::DetachGpuPool) or destroy the Client, so the daemon frees the
// pool under nobody; GetToDevice and GetToPaged given the import do both themselves. A process
// that makes no call in that window is not told, and its mapping outlives the pool. Destroy a CUDA
// import before the process's CUDA context goes (before returning from main). Move-only; not
// synchronised, but slices may be used from any thread while the import lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "client/client.h"
#include "client/shared_arena.h"
#include "common/status.h"

namespace kvtier::client::gpu {

class GpuPoolImport {
 public:
  GpuPoolImport();
  ~GpuPoolImport();
  GpuPoolImport(GpuPoolImport&& other) noexcept;
  GpuPoolImport& operator=(GpuPoolImport&& other) noexcept;

  // Maps `exported` (what Client::AttachGpuPool returned); a CUDA pool is opened on `device`
  // (this process's ordinal: the device of the copier that will read it), or with -1 on the
  // pool's own GPU as this process numbers it (the export names it by UUID, so differing
  // CUDA_VISIBLE_DEVICES cannot open the wrong GPU). Errors: kInvalidArgument for an unknown kind
  // or a mapping whose size differs from pool_bytes; kRejected for a cuda-ipc pool in a build
  // without CUDA; kNotFound when this process does not see the pool's GPU; the translated errors
  // of mmap or cudaIpcOpenMemHandle.
  static Result<GpuPoolImport> Map(GpuPoolExport exported, int device = -1);

  bool mapped() const { return base_ != nullptr; }
  // True for a memfd pool (host memory standing in for a device): only FakeDeviceCopier may
  // copy out of it, and only CudaDeviceCopier out of a real one.
  bool fake() const { return fake_; }
  // The CUDA device (this process's ordinal) the pool was opened on; -1 for a fake pool.
  int device() const { return device_; }
  size_t size_bytes() const { return size_bytes_; }
  std::byte* base() const { return base_; }
  // [offset, offset + length) of the pool in this process, or nullptr when the range does not
  // lie inside it (the daemon is trusted with placement, not with memory safety).
  std::byte* Slice(uint64_t offset, uint64_t length) const;

 private:
  struct CudaImport;  // cuda::IpcImport, in CUDA builds

  SharedArena memfd_;
  std::unique_ptr<CudaImport> cuda_;
  std::byte* base_ = nullptr;
  size_t size_bytes_ = 0;
  int device_ = -1;
  bool fake_ = false;
};

// Client::AttachGpuPool, then GpuPoolImport::Map. Errors: those of both; a daemon without a GPU
// pool answers kNotFound with the reason ("no GPU tier: ..."). When the mapping fails the
// connection is detached again (Client::DetachGpuPool). After an error the client goes on as
// before: it is leased host blocks only, and reads the others inline.
// `device` as for Map: pass the copier's device (DeviceCopier::device()).
Result<GpuPoolImport> AttachGpuPool(Client& client, int device = -1);

}  // namespace kvtier::client::gpu
