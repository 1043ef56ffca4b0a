// Status and Result<T>: the one error vocabulary of kvtier.
//
// Every fallible function returns a Status (a code plus a human-readable message) or a Result<T>
// (a value or a non-OK Status). The codes are those of a cache: a miss is kNotFound, "no room now,
// try again or evict" is kBusy, a request that can never succeed is kRejected or kInvalidArgument.
// Foreign errors (errno, io_uring completions, rocksdb::Status, boost error codes) are translated
// into this vocabulary once, where they enter kvtier. Both types are cheap to move and are safe to
// use from any thread; a single object is not synchronised.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvtier {

enum class StatusCode : uint8_t {
  kOk = 0,
  kNotFound,          // a miss: the key, namespace, lease or reservation does not exist
  kAlreadyExists,     // the key is already stored; a put of identical content is not needed
  kRejected,          // can never succeed as asked (bigger than the tier, policy refusal)
  kBusy,              // no room or resource right now; retry later or after releasing something
  kDeviceError,       // a storage device or driver failed (EIO, CUDA error)
  kChecksumMismatch,  // stored bytes did not match their checksum; treated as a miss
  kCorruption,        // on-disk metadata is malformed or of an unknown version
  kInvalidArgument,   // the caller passed a malformed or absurd value
  kTimeout,           // a deadline passed (lease, reservation, I/O)
  kShuttingDown,      // the component is stopping and accepts no new work
  kPermissionDenied,  // authentication or authorisation failed
  kInternal,          // a broken invariant inside kvtier: a bug
  // The component started what the call needs and it is under way (room being made on a disk, a
  // block being read up from one): call again shortly. Last, so the other codes keep their values
  // (the C ABI returns them as numbers).
  kPending,
};

// Stable upper-case name of a code, as used in logs and wire errors ("NOT_FOUND", "BUSY", ...).
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "BUSY: host tier is full" (or "OK").
  std::string ToString() const;

  bool operator==(const Status& other) const = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Shorthand constructors, one per code, so call sites read as the condition they report.
inline Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
inline Status AlreadyExists(std::string msg) {
  return {StatusCode::kAlreadyExists, std::move(msg)};
}
inline Status Rejected(std::string msg) { return {StatusCode::kRejected, std::move(msg)}; }
inline Status Busy(std::string msg) { return {StatusCode::kBusy, std::move(msg)}; }
inline Status Pending(std::string msg) { return {StatusCode::kPending, std::move(msg)}; }
inline Status DeviceError(std::string msg) { return {StatusCode::kDeviceError, std::move(msg)}; }
inline Status ChecksumMismatch(std::string msg) {
  return {StatusCode::kChecksumMismatch, std::move(msg)};
}
inline Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
inline Status InvalidArgument(std::string msg) {
  return {StatusCode::kInvalidArgument, std::move(msg)};
}
inline Status Timeout(std::string msg) { return {StatusCode::kTimeout, std::move(msg)}; }
inline Status ShuttingDown(std::string msg) { return {StatusCode::kShuttingDown, std::move(msg)}; }
inline Status PermissionDenied(std::string msg) {
  return {StatusCode::kPermissionDenied, std::move(msg)};
}
inline Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

// Translates an errno value: ENOENT -> kNotFound, ENOSPC/ENOMEM/EAGAIN -> kBusy,
// EINVAL -> kInvalidArgument, EACCES/EPERM -> kPermissionDenied, anything else -> kDeviceError.
// `what` names the operation ("open /data/blocks.dat").
Status ErrnoStatus(int err, std::string_view what);

// A value of type T, or the non-OK Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design, like std::expected
  Result(Status status) : state_(std::move(status)) {
    if (std::get<Status>(state_).ok()) {
      state_ = Status(StatusCode::kInternal, "Result constructed from an OK status without value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  // The error; Status::Ok() when a value is present.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(state_); }

  // Precondition: ok(). Checked with an assertion in debug builds.
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace kvtier

// Returns early from the enclosing function when `expr` (a Status) is not OK.
#define KVTIER_RETURN_IF_ERROR(expr)         \
  do {                                       \
    ::kvtier::Status _kvtier_st = (expr);    \
    if (!_kvtier_st.ok()) return _kvtier_st; \
  } while (0)

#define KVTIER_CONCAT_INNER(a, b) a##b
#define KVTIER_CONCAT(a, b) KVTIER_CONCAT_INNER(a, b)
// `KVTIER_ASSIGN_OR_RETURN(auto x, Compute());` binds the value or returns the error.
#define KVTIER_ASSIGN_OR_RETURN(lhs, expr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL(KVTIER_CONCAT(_kvtier_res_, __LINE__), lhs, expr)
#define KVTIER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
