#include "common/fd_passing.h"

#include <cerrno>
#include <cstring>

namespace kvtier {

Result<size_t> SendWithFd(int socket_fd, std::string_view bytes, int fd) {
  if (bytes.empty()) return InvalidArgument("a descriptor needs at least one byte to ride on");
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  for (;;) {
    const ssize_t sent = sendmsg(socket_fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent > 0) return static_cast<size_t>(sent);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Busy("socket buffer full");
    return ErrnoStatus(sent < 0 ? errno : EIO, "sendmsg with SCM_RIGHTS");
  }
}

std::vector<int> TakePassedFds(msghdr& msg) {
  std::vector<int> fds;
  if (msg.msg_control == nullptr) return fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.push_back(fd);
    }
  }
  return fds;
}

ssize_t ReceiveWithFds(int socket_fd, std::span<char> buffer, int flags, std::vector<int>& fds) {
  iovec iov{buffer.data(), buffer.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = ::recvmsg(socket_fd, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got >= 0) {
    for (int fd : TakePassedFds(msg)) fds.push_back(fd);
  }
  return got;
}

}  // namespace kvtier
