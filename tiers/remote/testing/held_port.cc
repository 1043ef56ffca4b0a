#include "tiers/remote/testing/held_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

namespace kvtier::tiers::remote::testing {

Result<std::unique_ptr<HeldPort>> HeldPort::Open(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus(errno, "socket");
  // The dead node's connections may linger in TIME_WAIT.
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 16) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "listen at 127.0.0.1:" + std::to_string(port));
  }
  return std::unique_ptr<HeldPort>(new HeldPort(fd));
}

HeldPort::HeldPort(int listen_fd) : listen_fd_(listen_fd), thread_([this] { AcceptLoop(); }) {}

HeldPort::~HeldPort() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  thread_.join();
  Release();
  ::close(listen_fd_);
}

bool HeldPort::WaitForGet(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return got_get_.wait_for(lock, timeout, [&] { return !held_.empty(); });
}

void HeldPort::Release() {
  std::lock_guard lock(mu_);
  for (const int fd : held_) ::close(fd);
  held_.clear();
}

void HeldPort::Answer(std::string_view reply) {
  std::lock_guard lock(mu_);
  for (const int fd : held_) (void)::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
}

bool HeldPort::HeldClosedByClient() {
  std::lock_guard lock(mu_);
  if (held_.empty()) return false;
  for (const int fd : held_) {
    // recv answers 0 only at the end of the stream: nothing waiting, or bytes, mean still open.
    char byte;
    if (::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) != 0) return false;
  }
  return true;
}

size_t HeldPort::gets_held() {
  std::lock_guard lock(mu_);
  return gets_held_;
}

void HeldPort::AcceptLoop() {
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) Serve(fd);
  }
}

void HeldPort::Serve(int fd) {
  // The client writes each request at once; a second is plenty on a loaded machine. A data
  // connection starts with READONLY (answered, as a node would); RESP's GET is
  // "*2\r\n$3\r\nGET\r\n$<len>\r\n<key>\r\n".
  char buf[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const ssize_t n = ::poll(&p, 1, 1000) > 0 ? ::recv(fd, buf, sizeof(buf), 0) : 0;
    const std::string_view request(buf, n > 0 ? static_cast<size_t>(n) : 0);
    if (request.find("\r\nREADONLY\r\n") != std::string_view::npos &&
        ::send(fd, "+OK\r\n", 5, MSG_NOSIGNAL) == 5) {
      continue;
    }
    if (request.find("\r\nGET\r\n") != std::string_view::npos) {
      std::lock_guard lock(mu_);
      held_.push_back(fd);
      ++gets_held_;
      got_get_.notify_all();
      return;
    }
    ::close(fd);
    return;
  }
}

}  // namespace kvtier::tiers::remote::testing
