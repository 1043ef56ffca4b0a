#include "common/status.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace kvtier {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kRejected:
      return "REJECTED";
    case StatusCode::kBusy:
      return "BUSY";
    case StatusCode::kDeviceError:
      return "DEVICE_ERROR";
    case StatusCode::kChecksumMismatch:
      return "CHECKSUM_MISMATCH";
    case StatusCode::kCorruption:
      return "CORRUPTION";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kTimeout:
      return "TIMEOUT";
    case StatusCode::kShuttingDown:
      return "SHUTTING_DOWN";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kPending:
      return "PENDING";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  std::string out(StatusCodeName(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status ErrnoStatus(int err, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOENT:
      return NotFound(std::move(msg));
    case ENOSPC:
    case ENOMEM:
    case EAGAIN:
      return Busy(std::move(msg));
    case EINVAL:
      return InvalidArgument(std::move(msg));
    case EACCES:
    case EPERM:
      return PermissionDenied(std::move(msg));
    case ETIMEDOUT:
      return Timeout(std::move(msg));
    default:
      return DeviceError(std::move(msg));
  }
}

}  // namespace kvtier
