// IoBackend: positioned reads and writes on file descriptors, submitted in batches.
//
// The NVMe tier turns every block read or write into a small batch of requests (record header,
// aligned payload, unaligned tail) and hands the batch to one IoBackend. Submit() returns when every
// request of the batch has completed, successfully or not; each request gets its own Status. A
// backend retries what the kernel asks it to retry (short transfers: the rest is resubmitted;
// EAGAIN and EINTR: the same request again, at most kMaxRetries times) and translates every other
// errno once, here: kDeviceError with the errno text, naming the operation, fd, offset and length.
// ENOSPC is kDeviceError too, not kBusy: the data files are preallocated, so ENOSPC means the file
// system or thin device under them is full, which evicting blocks cannot fix. A read that meets end
// of file before the request is complete is kDeviceError ("unexpected end of file").
//
// Two implementations pass the same test suite: io_uring (liburing) and a pread/pwrite thread pool.
// MakeIoBackend() picks one from IoBackendConfig; `auto` prefers io_uring and falls back to threads
// when the kernel refuses rings with EPERM, ENOSYS or EOPNOTSUPP (seccomp, old kernels, and
// kernel.io_uring_disabled, which the log line then names), logging why.
//
// Registered memory: a backend may be told about one memory region (the host arena) with
// RegisterRegion(); requests whose buffer lies inside it then go straight between the region and the
// device (io_uring: IORING_OP_READ_FIXED / WRITE_FIXED on pre-pinned pages). Buffers outside the
// region still work, through the ordinary path. The region must outlive the backend.
//
// Fault injection: IoBackendConfig::fault_filter is a test seam inside both backends. It sees every
// completion (before retry handling) and may replace its result with an error, a short count or
// -EAGAIN, so the retry and error paths run against real files. Production code leaves it null.
//
// Thread safety: Submit, Sync and the const accessors may be called from any number of threads at
// once. RegisterRegion must be called before the first Submit (not concurrently with it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier::tiers::nvme {

enum class IoOp : uint8_t { kRead, kWrite };

// One positioned transfer. For O_DIRECT files the caller keeps buffer, offset and length aligned
// to the file's block alignment; the backend does not check (the kernel answers EINVAL).
struct IoRequest {
  IoOp op = IoOp::kRead;
  int fd = -1;
  uint64_t offset = 0;
  std::byte* buffer = nullptr;  // read into / write from; for writes the bytes are only read
  uint64_t length = 0;
  Status status;  // set by Submit
};

// Decides the fate of one completion; test-only seam (see the header comment). `result` is what
// the kernel returned: bytes transferred (>= 0) or -errno. The return value replaces it and must be
// -errno, or a byte count in [0, result] when result >= 0. Called from I/O threads concurrently.
class CompletionFilter {
 public:
  virtual ~CompletionFilter() = default;
  virtual int64_t Filter(const IoRequest& request, int64_t result) = 0;
  // io_uring only: called before each submission to the kernel; a -errno return stands for the
  // kernel refusing it (ENOMEM, say), with the prepared entries left unconsumed in the ring.
  virtual int RefuseSubmit() { return 0; }
};

enum class IoBackendKind : uint8_t { kAuto, kIoUring, kThreads };

struct IoBackendConfig {
  IoBackendKind kind = IoBackendKind::kAuto;
  // io_uring: entries per ring (requests in flight per ring). threads: worker threads.
  uint32_t queue_depth = 32;
  // io_uring: rings, each used by one submitting thread at a time; a batch holds one ring from
  // submission to its last completion. More rings let more threads submit at once.
  uint32_t ring_count = 4;
  std::shared_ptr<CompletionFilter> fault_filter;  // tests only
};

// "auto", "io_uring", "threads"; nullopt-like kInvalidArgument for anything else.
Result<IoBackendKind> ParseIoBackendKind(std::string_view name);
std::string_view IoBackendKindName(IoBackendKind kind);

class IoBackend {
 public:
  // Requests that keep failing with EAGAIN or EINTR, or that keep transferring 0 bytes on a write,
  // give up after this many attempts with kDeviceError, so that nothing loops for ever.
  static constexpr int kMaxRetries = 1000;

  virtual ~IoBackend() = default;

  // Runs every request and sets its status; returns when all have completed. The requests of one
  // batch run concurrently, in no particular order: a caller that needs ordering submits twice.
  virtual void Submit(std::span<IoRequest> requests) = 0;

  // fdatasync(fd). kDeviceError on failure.
  virtual Status Sync(int fd) = 0;

  // Registers [base, base + bytes) for zero-copy transfers. Errors: kInvalidArgument for an empty
  // or second region; kBusy when the kernel refuses to pin it (RLIMIT_MEMLOCK): the backend keeps
  // working through the ordinary path. The thread backend accepts and ignores the region.
  virtual Status RegisterRegion(std::byte* base, uint64_t bytes) = 0;

  virtual IoBackendKind kind() const = 0;
  virtual uint32_t queue_depth() const = 0;
  // Requests currently submitted and not completed, over all callers (a gauge for metrics).
  virtual uint64_t in_flight() const = 0;
  // Requests that used a registered buffer (io_uring fixed-buffer opcodes).
  virtual uint64_t fixed_buffer_requests() const = 0;
};

// Builds the backend `config` asks for. Errors: kInvalidArgument for queue_depth or ring_count of 0
// or above 4096; with kind io_uring, the translated errno of io_uring_queue_init (no fallback when
// io_uring was asked for by name).
Result<std::unique_ptr<IoBackend>> MakeIoBackend(const IoBackendConfig& config);

// The one place an errno from a transfer becomes a Status (see the header comment).
Status TranslateIoError(int err, const IoRequest& request, std::string_view engine);

}  // namespace kvtier::tiers::nvme
