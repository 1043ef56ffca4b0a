#include "tiers/remote/testing/fake_cluster_node.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/resp/request_parser.h"

namespace kvtier::tiers::remote::testing {
namespace {

std::string Bulk(std::string_view text) {
  return "$" + std::to_string(text.size()) + "\r\n" + std::string(text) + "\r\n";
}

}  // namespace

struct FakeClusterNode::Connection {
  int fd;
  resp::RequestParser parser;
};

Result<std::unique_ptr<FakeClusterNode>> FakeClusterNode::Start() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 16) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "listen on a loopback port");
  }
  return std::unique_ptr<FakeClusterNode>(new FakeClusterNode(fd, ntohs(addr.sin_port)));
}

FakeClusterNode::FakeClusterNode(int listen_fd, uint16_t port)
    : listen_fd_(listen_fd),
      port_(port),
      shards_(ShardsOwnedBy(address())),
      thread_([this] { Serve(); }) {}

FakeClusterNode::~FakeClusterNode() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  thread_.join();
  for (const auto& conn : conns_) ::close(conn->fd);
  ::close(listen_fd_);
}

std::string FakeClusterNode::ShardsOwnedBy(const HostPort& master) {
  // One shard, in the shape Redis 7 sends over RESP2: [slots, [0, 16383], nodes, [{node}]].
  const std::string node = "*8\r\n" + Bulk("port") + ":" + std::to_string(master.port) + "\r\n" +
                           Bulk("endpoint") + Bulk(master.host) + Bulk("role") + Bulk("master") +
                           Bulk("health") + Bulk("online");
  return "*1\r\n*4\r\n" + Bulk("slots") + "*2\r\n:0\r\n:16383\r\n" + Bulk("nodes") + "*1\r\n" +
         node;
}

void FakeClusterNode::SetShards(std::string reply) {
  std::lock_guard lock(mu_);
  shards_ = std::move(reply);
}

void FakeClusterNode::SetReply(const std::string& name, std::string reply) {
  std::lock_guard lock(mu_);
  replies_[name] = std::move(reply);
}

void FakeClusterNode::HoldNextShards() {
  std::lock_guard lock(mu_);
  hold_next_ = true;
}

bool FakeClusterNode::WaitForHeld(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return held_cv_.wait_for(lock, timeout, [&] { return held_fd_ >= 0; });
}

void FakeClusterNode::AnswerHeld(std::string_view reply) {
  std::lock_guard lock(mu_);
  if (held_fd_ >= 0) (void)::send(held_fd_, reply.data(), reply.size(), MSG_NOSIGNAL);
  held_fd_ = -1;
}

size_t FakeClusterNode::open_connections() {
  std::lock_guard lock(mu_);
  return conns_.size();
}

void FakeClusterNode::Serve() {
  while (true) {
    std::vector<pollfd> polled{{listen_fd_, POLLIN, 0}};
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      for (const auto& conn : conns_) polled.push_back({conn->fd, POLLIN, 0});
    }
    // A short timeout: the loop also notices stopping_.
    if (::poll(polled.data(), polled.size(), 20) <= 0) continue;
    std::lock_guard lock(mu_);
    if ((polled[0].revents & POLLIN) != 0) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) conns_.push_back(std::make_unique<Connection>(Connection{fd, {}}));
    }
    for (size_t i = 1; i < polled.size(); ++i) {
      if (polled[i].revents == 0) continue;
      const auto it = std::find_if(conns_.begin(), conns_.end(),
                                   [&](const auto& c) { return c->fd == polled[i].fd; });
      if (it == conns_.end() || Answer(**it)) continue;
      if (held_fd_ == (*it)->fd) held_fd_ = -1;
      ::close((*it)->fd);
      conns_.erase(it);
    }
  }
}

bool FakeClusterNode::Answer(Connection& conn) {
  char buf[4096];
  const ssize_t n = ::recv(conn.fd, buf, sizeof(buf), 0);
  if (n <= 0) return false;
  std::string_view input(buf, static_cast<size_t>(n));
  std::string out;
  while (!input.empty()) {
    const Result<size_t> consumed = conn.parser.Feed(input);
    if (!consumed.ok()) return false;
    input.remove_prefix(*consumed);
    if (!conn.parser.has_command()) continue;
    const resp::Command command = conn.parser.TakeCommand();
    const std::string name = command.UpperName();
    if (name == "INFO") {
      out += Bulk("# Cluster\r\ncluster_enabled:1\r\n");
    } else if (name == "READONLY" || name == "ASKING" || name == "AUTH") {
      out += "+OK\r\n";
    } else if (name == "CLUSTER" && held_fd_ >= 0) {
      return false;  // refused while another map query is held
    } else if (name == "CLUSTER" && hold_next_) {
      hold_next_ = false;
      held_fd_ = conn.fd;
      held_cv_.notify_all();
      break;  // a map query comes alone on its connection
    } else if (name == "CLUSTER") {
      out += shards_;
    } else if (const auto reply = replies_.find(name); reply != replies_.end()) {
      out += reply->second;
    } else {
      out += "-ERR unknown command '" + name + "'\r\n";
    }
  }
  if (!out.empty()) (void)::send(conn.fd, out.data(), out.size(), MSG_NOSIGNAL);
  return true;
}

}  // namespace kvtier::tiers::remote::testing
