#include "tiers/nvme/io_backend.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "tiers/nvme/io_retry.h"
#include "tiers/nvme/thread_backend.h"
#include "tiers/nvme/uring_backend.h"

namespace kvtier::tiers::nvme {

Result<IoBackendKind> ParseIoBackendKind(std::string_view name) {
  if (name == "auto") return IoBackendKind::kAuto;
  if (name == "io_uring") return IoBackendKind::kIoUring;
  if (name == "threads") return IoBackendKind::kThreads;
  return InvalidArgument("io backend must be auto, io_uring or threads, not '" + std::string(name) +
                         "'");
}

std::string_view IoBackendKindName(IoBackendKind kind) {
  switch (kind) {
    case IoBackendKind::kAuto: return "auto";
    case IoBackendKind::kIoUring: return "io_uring";
    case IoBackendKind::kThreads: return "threads";
  }
  return "unknown";
}

Status TranslateIoError(int err, const IoRequest& request, std::string_view engine) {
  std::string msg(engine);
  msg += request.op == IoOp::kRead ? " read" : " write";
  msg += " fd " + std::to_string(request.fd) + " offset " + std::to_string(request.offset) +
         " length " + std::to_string(request.length) + ": " + std::strerror(err);
  return DeviceError(std::move(msg));
}

namespace internal {
namespace {

bool ApplyResultImpl(IoRequest& request, IoProgress& progress, int64_t result,
                     std::string_view engine) {
  if (result == -EAGAIN || result == -EINTR ||
      (result == 0 && request.op == IoOp::kWrite && Remaining(request, progress) > 0)) {
    if (++progress.retries <= IoBackend::kMaxRetries) return false;
    request.status = TranslateIoError(result == 0 ? EIO : static_cast<int>(-result), request,
                                      engine);
    request.status = DeviceError(request.status.message() + " (gave up after " +
                                 std::to_string(IoBackend::kMaxRetries) + " retries)");
    return true;
  }
  if (result < 0) {
    request.status = TranslateIoError(static_cast<int>(-result), request, engine);
    return true;
  }
  if (result == 0 && Remaining(request, progress) > 0) {
    request.status = DeviceError(TranslateIoError(EIO, request, engine).message() +
                                 " (unexpected end of file after " +
                                 std::to_string(progress.done) + " bytes)");
    return true;
  }
  progress.done += static_cast<uint64_t>(result);
  if (progress.done < request.length) return false;  // short transfer: submit the rest
  request.status = Status::Ok();
  return true;
}

}  // namespace

bool ApplyResult(IoRequest& request, IoProgress& progress, int64_t result,
                 std::string_view engine) {
  progress.finished = ApplyResultImpl(request, progress, result, engine);
  return progress.finished;
}

Status SyncFd(int fd, std::string_view engine) {
  while (::fdatasync(fd) != 0) {
    if (errno != EINTR) {
      return DeviceError(std::string(engine) + " fdatasync fd " + std::to_string(fd) + ": " +
                         std::strerror(errno));
    }
  }
  return Status::Ok();
}

int64_t FilterResult(CompletionFilter* filter, const IoRequest& request, int64_t result) {
  if (filter == nullptr) return result;
  int64_t filtered = filter->Filter(request, result);
  // A filter may shorten a transfer or turn it into an error, never claim more than happened.
  if (filtered > result && result >= 0) return result;
  if (filtered >= 0 && result < 0) return result;
  return filtered;
}

}  // namespace internal

namespace {

// kernel.io_uring_disabled: 0 allowed, 1 only for privileged users and io_uring_group, 2 refused
// to everyone; -1 where the kernel has no such switch (before 6.6).
int IoUringDisabledSysctl() {
  FILE* f = std::fopen("/proc/sys/kernel/io_uring_disabled", "r");
  if (f == nullptr) return -1;
  int value = -1;
  if (std::fscanf(f, "%d", &value) != 1) value = -1;
  std::fclose(f);
  return value;
}

bool IsRefusal(int err) { return err == EPERM || err == ENOSYS || err == EOPNOTSUPP; }

}  // namespace

Result<std::unique_ptr<IoBackend>> MakeIoBackend(const IoBackendConfig& config) {
  if (config.queue_depth == 0 || config.queue_depth > 4096) {
    return InvalidArgument("io queue_depth must be in [1, 4096], not " +
                           std::to_string(config.queue_depth));
  }
  if (config.ring_count == 0 || config.ring_count > 4096) {
    return InvalidArgument("io ring_count must be in [1, 4096], not " +
                           std::to_string(config.ring_count));
  }
  if (config.kind == IoBackendKind::kThreads) return ThreadBackend::Create(config);
  // Ask the kernel rather than guess from the sysctl: with io_uring_disabled = 1 a privileged
  // daemon still gets rings. The sysctl only explains a refusal in the log.
  int err = 0;
  Result<std::unique_ptr<IoBackend>> uring = UringBackend::Create(config, &err);
  if (uring.ok() || config.kind == IoBackendKind::kIoUring || !IsRefusal(err)) return uring;
  int sysctl = IoUringDisabledSysctl();
  spdlog::warn("nvme: io_uring refused ({}{}); using the pread/pwrite thread backend",
               uring.status().ToString(),
               sysctl > 0 ? ", kernel.io_uring_disabled = " + std::to_string(sysctl) : "");
  return ThreadBackend::Create(config);
}

}  // namespace kvtier::tiers::nvme
