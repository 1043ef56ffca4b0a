// StatusError: how a kvtier Status crosses into Python.
//
// The bindings never let a Status go unnoticed: a call whose Result failed throws StatusError,
// and the translator registered in module.cc turns it into the matching subclass of
// kvtier.errors.KvtierError (NotFoundError, BusyError, ...), carrying the code name and the
// message as the C++ client produced it (for daemon errors, the daemon's own words). The C++ client
// itself never throws; this exception lives only in the binding layer, between a call and the
// pybind11 boundary.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include "common/status.h"

namespace kvtier::python {

class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)), what_(status_.ToString()) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  Status status_;
  std::string what_;
};

// Throws StatusError unless `status` is OK.
inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

// The value of `result`, or throws StatusError with its status.
template <typename T>
T ValueOrThrow(Result<T>&& result) {
  if (!result.ok()) throw StatusError(result.status());
  return std::move(result).value();
}

}  // namespace kvtier::python
