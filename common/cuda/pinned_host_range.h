// PinnedHostRange: registers a range of existing host memory with CUDA (cudaHostRegister) for the
// object's lifetime, so that copies between it and a GPU run at DMA speed instead of being staged
// through the driver's bounce buffers.
//
// How the host tier uses it: the daemon registers its whole HostArena mapping once at start-up,
// right after mapping it and before any client attaches, and keeps the PinnedHostRange beside the
// arena (destroyed before it: unregister, then munmap). A client registers its own mapping of the
// same memfd after Client::Attach() (registration is per process and per mapping; see
// client/gpu/device_transfer.h). Nothing else changes: the arena stays plain shared memory, and
// memcpy, io_uring and the socket path work on it as before.
//
// Best effort, like the arena's mlock: Register never fails. Without CUDA at build time (the stub
// in pinned_host_range_stub.cc), without a device, or when the driver refuses (RLIMIT_MEMLOCK,
// memory already registered) the range stays plain pageable memory, pinned() is false and status()
// says why; CUDA copies from it still work, only slower.
//
// Ownership: the object does not own the memory, only its registration; the memory must stay
// mapped until the object is destroyed. Move-only. Thread safety: const accessors from any thread.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace kvtier::cuda {

class PinnedHostRange {
 public:
  struct Options {
    // Pinned for every CUDA context in the process, not only the current device's. The daemon
    // and clients may copy on any GPU, so this is the default.
    bool portable = true;
    // Also map the range into the device address space (cudaHostRegisterMapped), for kernels that
    // read or write host memory directly. Copies do not need it.
    bool mapped = false;
  };

  // Registers [base, base + bytes). Never fails; see pinned() and status().
  static PinnedHostRange Register(void* base, size_t bytes, const Options& options);
  static PinnedHostRange Register(void* base, size_t bytes) { return Register(base, bytes, {}); }

  PinnedHostRange() = default;
  ~PinnedHostRange();
  PinnedHostRange(PinnedHostRange&& other) noexcept;
  PinnedHostRange& operator=(PinnedHostRange&& other) noexcept;
  PinnedHostRange(const PinnedHostRange&) = delete;
  PinnedHostRange& operator=(const PinnedHostRange&) = delete;

  bool pinned() const { return base_ != nullptr; }
  // OK when pinned; otherwise why not (kRejected "built without CUDA", kNotFound "no device",
  // kBusy when the driver could not lock the pages, ...).
  const Status& status() const { return status_; }
  void* base() const { return base_; }
  size_t size() const { return bytes_; }
  // With Options::mapped: the range's address in device space (equal to base() on systems with
  // unified addressing); nullptr otherwise.
  void* device_pointer() const { return device_pointer_; }

 private:
  void Reset();

  void* base_ = nullptr;  // non-null only while registered
  size_t bytes_ = 0;
  void* device_pointer_ = nullptr;
  Status status_ = Rejected("not registered");
};

}  // namespace kvtier::cuda
