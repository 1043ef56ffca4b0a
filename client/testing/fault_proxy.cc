#include "client/testing/fault_proxy.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string_view>
#include <utility>

#include "common/fd_passing.h"
#include "common/resp/reply_parser.h"
#include "common/resp/request_parser.h"
#include "daemon/server/test_client.h"

namespace kvtier::client::testing {
namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "fault proxy: %s: %s\n", what, std::strerror(errno));
  std::abort();
}

bool WouldBlock() { return errno == EAGAIN || errno == EWOULDBLOCK; }

int UnixSocket() {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket");
  return fd;
}

sockaddr_un UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return addr;
}

void SetNonBlocking(int fd) {
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) Die("fcntl");
}

// The answer to one command: from the server (forwarded) or from the relay (a raw reply).
struct Slot {
  std::string bytes;
  bool complete = false;
  bool forwarded = false;
  int fd = -1;  // passed with bytes[0]; owned
};

// Bytes on their way to the client; `fd` rides on the first of them.
struct Segment {
  std::string bytes;
  size_t sent = 0;
  int fd = -1;  // owned until sent
};

}  // namespace

struct FaultProxy::Link {
  int client_fd = -1;
  int upstream_fd = -1;
  resp::RequestParser requests;
  resp::ReplyParser replies;
  std::deque<Slot> slots;  // one per command received and not yet passed on, oldest first
  std::deque<Segment> to_client;
  std::string to_upstream;
  uint64_t commands = 0;
  bool upstream_done = false;  // the server closed; pass on what came, then close

  ~Link() {
    for (const Slot& s : slots) {
      if (s.fd >= 0) ::close(s.fd);
    }
    for (const Segment& s : to_client) {
      if (s.fd >= 0) ::close(s.fd);
    }
    if (client_fd >= 0) ::close(client_fd);
    if (upstream_fd >= 0) ::close(upstream_fd);
  }
};

FaultProxy::FaultProxy(std::string upstream_path) : upstream_path_(std::move(upstream_path)) {
  char dir_template[] = "/tmp/kvtier-fault-proxy-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) Die("mkdtemp");
  dir_ = dir_template;
  socket_path_ = dir_ + "/relay.sock";
  listen_fd_ = UnixSocket();
  const sockaddr_un addr = UnixAddress(socket_path_);
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) < 0) Die("bind");
  if (::listen(listen_fd_, 64) < 0) Die("listen");
  if (::pipe2(wake_pipe_, O_CLOEXEC) < 0) Die("pipe");
  thread_ = std::thread([this] { Serve(); });
}

FaultProxy::~FaultProxy() {
  const char byte = 0;
  (void)!::write(wake_pipe_[1], &byte, 1);
  thread_.join();
  links_.clear();
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
  ::unlink(socket_path_.c_str());
  ::rmdir(dir_.c_str());
}

void FaultProxy::SetRawReply(std::string command, std::string raw) {
  MutexLock lock(mu_);
  raw_replies_[std::move(command)] = std::move(raw);
}

void FaultProxy::SetCloseOn(std::string command) {
  MutexLock lock(mu_);
  close_on_ = std::move(command);
}

void FaultProxy::OnCommand(std::string command, std::function<void()> action) {
  MutexLock lock(mu_);
  actions_[std::move(command)] = std::move(action);
}

std::vector<std::string> FaultProxy::commands() const {
  MutexLock lock(mu_);
  return commands_;
}

FaultProxy::Fault FaultProxy::Take(const std::string& name, std::string* raw) {
  std::function<void()> action;
  {
    MutexLock lock(mu_);
    commands_.push_back(name);
    if (close_on_ == name) {
      close_on_.clear();
      return Fault::kClose;
    }
    if (auto it = raw_replies_.find(name); it != raw_replies_.end()) {
      *raw = std::move(it->second);
      raw_replies_.erase(it);
      return Fault::kRawReply;
    }
    if (auto it = actions_.find(name); it != actions_.end()) action = it->second;
  }
  if (action) action();
  return Fault::kNone;
}

void FaultProxy::Accept() {
  const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (client < 0) return;
  auto link = std::make_unique<Link>();
  link->client_fd = client;
  link->upstream_fd = UnixSocket();
  const sockaddr_un addr = UnixAddress(upstream_path_);
  if (::connect(link->upstream_fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) < 0) {
    return;  // the link closes both sides: the client sees the server gone
  }
  SetNonBlocking(link->client_fd);
  SetNonBlocking(link->upstream_fd);
  links_.push_back(std::move(link));
}

bool FaultProxy::FromClient(Link& link) {
  char buffer[64 << 10];
  const ssize_t n = ::recv(link.client_fd, buffer, sizeof(buffer), 0);
  if (n < 0) return WouldBlock() || errno == EINTR;
  if (n == 0) return false;
  std::string_view input(buffer, static_cast<size_t>(n));
  while (!input.empty()) {
    Result<size_t> used = link.requests.Feed(input);
    if (!used.ok()) return false;
    input.remove_prefix(*used);
    if (!link.requests.has_command()) continue;
    const resp::Command command = link.requests.TakeCommand();
    ++link.commands;
    std::string raw;
    switch (Take(command.UpperName(), &raw)) {
      case Fault::kClose:
        return false;
      case Fault::kRawReply:
        link.slots.push_back(Slot{std::move(raw), /*complete=*/true, /*forwarded=*/false, -1});
        break;
      case Fault::kNone:
        link.slots.push_back(Slot{"", /*complete=*/false, /*forwarded=*/true, -1});
        link.to_upstream += server::testing::Resp(command.args);
        break;
    }
  }
  return true;
}

bool FaultProxy::FromUpstream(Link& link) {
  char buffer[64 << 10];
  std::vector<int> fds;
  const ssize_t n = ReceiveWithFds(link.upstream_fd, buffer, 0, fds);
  if (n < 0) return WouldBlock();
  if (n == 0) {
    link.upstream_done = true;
    return true;
  }
  // The kernel ends a read right after the bytes a descriptor came with, and the server sends
  // one on the first byte of a reply: it belongs to the last reply that starts in this read.
  Slot* started = nullptr;
  std::string_view input(buffer, static_cast<size_t>(n));
  auto slot = link.slots.begin();
  while (!input.empty()) {
    while (slot != link.slots.end() && (!slot->forwarded || slot->complete)) ++slot;
    if (slot == link.slots.end()) return false;  // a reply nobody asked for
    Result<size_t> used = link.replies.Feed(input);
    if (!used.ok()) return false;
    if (slot->bytes.empty() && *used > 0) started = &*slot;
    slot->bytes.append(input.substr(0, *used));
    input.remove_prefix(*used);
    if (link.replies.has_reply()) {
      (void)link.replies.TakeReply();
      slot->complete = true;
    }
  }
  for (int fd : fds) {
    if (started == nullptr || started->fd >= 0) {
      ::close(fd);
    } else {
      started->fd = fd;
    }
  }
  return true;
}

bool FaultProxy::Pump(Link& link) {
  while (!link.slots.empty() && link.slots.front().complete &&
         link.commands >= hold_replies_until.load()) {
    Slot& s = link.slots.front();
    link.to_client.push_back(Segment{std::move(s.bytes), 0, std::exchange(s.fd, -1)});
    link.slots.pop_front();
  }
  while (!link.to_upstream.empty()) {
    const ssize_t n =
        ::send(link.upstream_fd, link.to_upstream.data(), link.to_upstream.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (WouldBlock() || errno == EINTR) break;
      return false;
    }
    link.to_upstream.erase(0, static_cast<size_t>(n));
  }
  while (!link.to_client.empty()) {
    Segment& s = link.to_client.front();
    const std::string_view rest = std::string_view(s.bytes).substr(s.sent);
    if (rest.empty()) {
      link.to_client.pop_front();
      continue;
    }
    if (s.fd >= 0) {
      Result<size_t> sent = SendWithFd(link.client_fd, rest, s.fd);
      if (!sent.ok()) return sent.status().code() == StatusCode::kBusy;
      ::close(std::exchange(s.fd, -1));
      s.sent += *sent;
      continue;
    }
    const ssize_t n = ::send(link.client_fd, rest.data(), rest.size(), MSG_NOSIGNAL);
    if (n < 0) return WouldBlock() || errno == EINTR;
    s.sent += static_cast<size_t>(n);
  }
  // A server that closed has said all it will: once that is out, the client sees the close too.
  return !(link.upstream_done && link.to_client.empty());
}

void FaultProxy::Serve() {
  pthread_setname_np(pthread_self(), "fault-proxy");
  for (;;) {
    std::vector<pollfd> pfds = {{wake_pipe_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const auto& link : links_) {
      const short to_client = link->to_client.empty() ? 0 : POLLOUT;
      const short to_upstream = link->to_upstream.empty() ? 0 : POLLOUT;
      pfds.push_back({link->client_fd, static_cast<short>(POLLIN | to_client), 0});
      pfds.push_back({link->upstream_fd,
                      static_cast<short>((link->upstream_done ? 0 : POLLIN) | to_upstream), 0});
    }
    if (::poll(pfds.data(), pfds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      Die("poll");
    }
    if (pfds[0].revents != 0) break;
    std::vector<std::unique_ptr<Link>> kept;
    for (size_t i = 0; i < links_.size(); ++i) {
      Link& link = *links_[i];
      bool alive = true;
      if ((pfds[2 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) alive = FromClient(link);
      if (alive && (pfds[3 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        alive = FromUpstream(link);
      }
      if (alive) alive = Pump(link);
      if (alive) kept.push_back(std::move(links_[i]));
    }
    links_ = std::move(kept);
    if ((pfds[1].revents & POLLIN) != 0) Accept();
  }
}

}  // namespace kvtier::client::testing
