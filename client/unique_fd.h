// UniqueFd: sole owner of one POSIX file descriptor, closed when the owner goes away.
//
// Every descriptor the client holds (its socket, the arena memfd received from the daemon) lives
// in one of these, so no error path can leak one. Move-only; no synchronisation.
#pragma once

#include <unistd.h>

#include <utility>

namespace kvtier::client {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int release() { return std::exchange(fd_, -1); }
  // Closes the held descriptor (if any) and takes `fd`. close() errors are ignored: the
  // descriptor is gone either way, and there is nothing a caller could do about it.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace kvtier::client
