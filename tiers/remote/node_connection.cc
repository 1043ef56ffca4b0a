#include "tiers/remote/node_connection.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <span>
#include <utility>

namespace kvtier::tiers::remote {
namespace {

using asio::redirect_error;
using asio::use_awaitable;
using boost::system::error_code;
using tcp = asio::ip::tcp;

}  // namespace

NodeConnection::NodeConnection(asio::io_context& io, HostPort node,
                               const ConnectionOptions& options, RemoteCounters& counters)
    : node_(std::move(node)),
      options_(options),
      counters_(counters),
      lookup_wait_(io),
      socket_(io),
      timer_(io),
      parser_(options.parser) {
  if (options.tls) tls_ = std::make_unique<asio::ssl::stream<tcp::socket>>(io, *options.tls);
}

NodeConnection::~NodeConnection() {
  // The lookup's thread must not wake a connection that is gone (nor post to an io_context that
  // may be next).
  if (lookup_) lookup_->Abandon();
}

void NodeConnection::Close() {
  broken_ = true;
  error_code ignored;
  lookup_wait_.cancel();
  Socket().close(ignored);
  timer_.cancel();
}

void NodeConnection::ArmDeadline(Deadline deadline) {
  const uint64_t generation = ++generation_;
  timed_out_ = false;
  timer_.expires_at(deadline);
  // A weak reference: a pending timer must not keep a dropped connection alive.
  timer_.async_wait([self = weak_from_this(), generation](const error_code& ec) {
    const auto conn = self.lock();
    if (ec || !conn || conn->generation_ != generation) return;
    conn->timed_out_ = true;
    conn->Close();
  });
}

void NodeConnection::Disarm() {
  // A handler already queued with success sees another generation and does nothing.
  ++generation_;
  timer_.cancel();
}

Status NodeConnection::Fail(const error_code& ec, std::string_view what) {
  const bool timed_out = timed_out_;
  Disarm();
  Close();
  if (timed_out) {
    return Timeout(node_.ToString() + ": no answer to " + std::string(what) +
                   " within the timeout");
  }
  if (ec == asio::error::eof) return DeviceError(node_.ToString() + " closed the connection");
  return DeviceError(node_.ToString() + ": " + std::string(what) + ": " + ec.message());
}

bool NodeConnection::StillOpenWhileIdle() {
  if (!usable()) return false;
  std::byte probe;
  const ssize_t n = ::recv(Socket().native_handle(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  // Under TLS, bytes may wait on a healthy connection (TLS 1.3 session tickets that no read has
  // consumed yet), so only the end of the stream tells there.
  // The peer's close_notify is such bytes, though, followed by the end of the stream; the peer
  // having shut its side down is what poll's POLLRDHUP says, bytes waiting or not. (A peer that
  // sends close_notify and holds the stream open until ours still passes: the call then fails.)
  if (n > 0 && tls_) {
    pollfd peer{.fd = Socket().native_handle(), .events = POLLRDHUP, .revents = 0};
    const int ready = ::poll(&peer, 1, 0);
    if (ready <= 0) return true;  // nothing to tell, or poll itself failed: as before
    if ((peer.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) return true;
  }
  broken_ = true;
  return false;
}

Awaitable<Status> NodeConnection::Open(Deadline deadline) {
  Status connected = co_await Connect(deadline);
  if (!connected.ok()) co_return connected;
  // An exchange's reply may complete while the deadline's handler closes the socket ahead of it
  // (see Connect): the connection is reported open only if it still is.
  const auto still_open = [this] {
    return usable() ? Status::Ok() : Fail(asio::error::operation_aborted, "opening");
  };
  if (!options_.password.empty()) {
    Status authenticated = co_await Authenticate(deadline);
    if (!authenticated.ok()) co_return authenticated;
  }
  if (!options_.read_only) co_return still_open();
  CommandBatch read_only;
  read_only.Command({"READONLY"});
  Result<std::vector<resp::Reply>> replies = co_await Exchange(read_only, deadline);
  if (!replies.ok()) co_return replies.status();
  // READONLY only lets a replica answer reads of its master's slots; a master ignores it. An ACL
  // user without it still reads and writes through the masters (a replica then redirects to its
  // master), so a refusal is said once, not made a failure of every connection.
  if (replies->front().is_error()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      spdlog::warn(
          "remote: {} refused READONLY ({}): replicas redirect reads to their masters; give the "
          "ACL user +readonly for reads from replicas",
          node_.ToString(), replies->front().str);
    }
  }
  co_return still_open();
}

Awaitable<Status> NodeConnection::Connect(Deadline deadline) {
  ArmDeadline(deadline);
  error_code ec;
  tcp::endpoint endpoint;
  const asio::ip::address address = asio::ip::make_address(node_.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, node_.port);
  } else {
    ec.clear();
    Result<tcp::endpoint> resolved = co_await Resolve();
    if (!resolved.ok()) co_return resolved.status();
    endpoint = *resolved;
  }
  co_await Socket().async_connect(endpoint, redirect_error(use_awaitable, ec));
  if (ec) co_return Fail(ec, "connect");
  Socket().set_option(tcp::no_delay(true), ec);
  // A pooled connection may sit idle for long: keepalive probes find one that a NAT or a load
  // balancer dropped silently (after about a minute and a half, not Linux's default two hours),
  // so that a call does not wait its whole timeout on it.
  Socket().set_option(asio::socket_base::keep_alive(true), ec);
  const int fd = Socket().native_handle();
  for (const auto& [option, value] :
       {std::pair{TCP_KEEPIDLE, 60}, {TCP_KEEPINTVL, 10}, {TCP_KEEPCNT, 3}}) {
    ::setsockopt(fd, IPPROTO_TCP, option, &value, sizeof(value));
  }
  if (tls_) {
    Status handshake = co_await Handshake();
    if (!handshake.ok()) co_return handshake;
  }
  // The deadline's handler (or a Close) may have run between the handshake's completion and this
  // coroutine's turn: it closed the socket, and the connection must not be reported open (its
  // first exchange then failed as "connection closed", a node's fault). Fail says kTimeout when
  // it was the deadline.
  if (broken_) co_return Fail(asio::error::operation_aborted, "connect");
  Disarm();
  connected_ = true;
  Add(counters_.connections_opened);
  co_return Status::Ok();
}

Awaitable<Result<tcp::endpoint>> NodeConnection::Resolve() {
  // Asio's resolver runs every lookup of an io_context on one thread, and a coroutine awaiting it
  // resumes only with getaddrinfo's answer, which cannot be cancelled: while a DNS server does
  // not answer, that held the call past its deadline (and every other lookup, and the client's
  // destruction, which waits for pending operations) for glibc's whole retry time. A HostLookup
  // runs on a thread of its own; this coroutine waits for its answer only until the deadline or
  // Close().
  Result<std::shared_ptr<HostLookup>> started =
      HostLookup::Start(node_.host, std::to_string(node_.port), options_.resolve,
                        [executor = lookup_wait_.get_executor(), self = weak_from_this()] {
                          // On the lookup's thread, before the connection abandoned the lookup: the
                          // connection, and so its io_context, still exist.
                          asio::post(executor, [self] {
                            if (const auto conn = self.lock()) conn->lookup_wait_.cancel();
                          });
                        });
  if (!started.ok()) {
    Disarm();
    Close();
    co_return Status(started.status().code(), node_.ToString() + ": " + started.status().message());
  }
  lookup_ = std::move(started).value();
  lookup_wait_.expires_at(Deadline::max());
  error_code ec;
  co_await lookup_wait_.async_wait(redirect_error(use_awaitable, ec));
  lookup_->Abandon();
  // The deadline (or a Close) may have come after the lookup's answer and before this turn: the
  // socket is closed, and connecting it would open it again with no deadline armed.
  if (broken_) co_return Fail(asio::error::operation_aborted, "resolve");
  std::optional<HostLookup::Answer> answer = lookup_->Take();
  // The deadline passed (Fail says kTimeout) or the connection was closed first.
  if (!answer) co_return Fail(asio::error::operation_aborted, "resolve");
  const addrinfo* first = answer->list.get();
  tcp::endpoint endpoint;
  if (answer->rc != 0 || first == nullptr || first->ai_addrlen > endpoint.capacity()) {
    Disarm();
    Close();
    co_return DeviceError(node_.ToString() + ": resolve: " +
                          (answer->rc != 0 ? ::gai_strerror(answer->rc) : "no stream address"));
  }
  std::memcpy(endpoint.data(), first->ai_addr, first->ai_addrlen);
  endpoint.resize(first->ai_addrlen);
  co_return endpoint;
}

Awaitable<Status> NodeConnection::Handshake() {
  // The name the certificate must carry: the operator's, or the host this node is reached at.
  const std::string& name =
      options_.tls_server_name.empty() ? node_.host : options_.tls_server_name;
  error_code ec;
  asio::ip::make_address(name, ec);
  if (ec) {
    // A DNS name goes in SNI too (an IP address may not).
    SSL_set_tlsext_host_name(tls_->native_handle(), name.c_str());
  }
  tls_->set_verify_callback(asio::ssl::host_name_verification(name), ec);
  ec.clear();
  co_await tls_->async_handshake(asio::ssl::stream_base::client, redirect_error(use_awaitable, ec));
  if (!ec) co_return Status::Ok();
  // A certificate that does not verify is the operator's configuration (the CA, the name), not a
  // node that is down: refused as a wrong password is, so that a node does not start on it.
  if (ec.category() == asio::error::get_ssl_category() &&
      ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
    Disarm();
    Close();
    co_return PermissionDenied(node_.ToString() + ": the TLS handshake refused the node's " +
                               "certificate (checked against the CA and the name '" + name +
                               "'): " + ec.message());
  }
  co_return Fail(ec, "the TLS handshake (certificate checked for '" + name + "')");
}

Awaitable<size_t> NodeConnection::ReadSome(asio::mutable_buffer buffer, error_code& ec) {
  size_t n = 0;
  if (tls_) {
    n = co_await tls_->async_read_some(buffer, redirect_error(use_awaitable, ec));
  } else {
    n = co_await socket_.async_read_some(buffer, redirect_error(use_awaitable, ec));
  }
  co_return n;
}

Awaitable<size_t> NodeConnection::WriteAll(const std::vector<asio::const_buffer>& buffers,
                                           error_code& ec) {
  size_t n = 0;
  if (tls_) {
    n = co_await asio::async_write(*tls_, buffers, redirect_error(use_awaitable, ec));
  } else {
    n = co_await asio::async_write(socket_, buffers, redirect_error(use_awaitable, ec));
  }
  co_return n;
}

Awaitable<Status> NodeConnection::Authenticate(Deadline deadline) {
  CommandBatch auth;
  if (options_.user.empty()) {
    auth.Command({"AUTH", options_.password});
  } else {
    auth.Command({"AUTH", options_.user, options_.password});
  }
  Result<std::vector<resp::Reply>> replies = co_await Exchange(auth, deadline);
  if (!replies.ok()) co_return replies.status();
  const resp::Reply& reply = replies->front();
  if (reply.is_error()) {
    Close();
    Add(counters_.errors_auth);
    // The node's words ("WRONGPASS invalid username-password pair ..."); never the password.
    co_return PermissionDenied(node_.ToString() + " refused AUTH" +
                               (options_.user.empty() ? "" : " as user '" + options_.user + "'") +
                               ": " + reply.str);
  }
  co_return Status::Ok();
}

Awaitable<Result<std::vector<resp::Reply>>> NodeConnection::Exchange(const CommandBatch& batch,
                                                                     Deadline deadline) {
  if (!usable()) co_return DeviceError(node_.ToString() + ": connection closed");
  ArmDeadline(deadline);
  std::vector<asio::const_buffer> buffers;
  for (const std::string_view piece : batch.Pieces()) {
    buffers.emplace_back(piece.data(), piece.size());
  }
  error_code ec;
  const size_t written = co_await WriteAll(buffers, ec);
  Add(counters_.bytes_out, written);
  Add(counters_.requests, batch.commands());
  if (ec) co_return Fail(ec, "a request");
  std::vector<resp::Reply> replies;
  replies.reserve(batch.commands());
  if (!read_buf_) read_buf_ = std::make_unique<std::array<char, kReadBufferBytes>>();
  while (true) {
    const Status drained = Drain(replies, batch.commands());
    if (!drained.ok()) co_return drained;
    if (replies.size() == batch.commands()) break;
    // The rest of a large value is read straight into it (the kernel's copy is the only one),
    // not through read_buf_: on the I/O thread that every fetch shares, that copy was most of
    // the time spent per block.
    const bool in_place = parser_.bulk_bytes_left() >= kInPlaceReadBytes;
    const std::span<char> into = in_place ? parser_.BeginInPlace(kInPlaceRoomBytes)
                                          : std::span<char>(read_buf_->data(), read_buf_->size());
    const size_t n = co_await ReadSome(asio::buffer(into.data(), into.size()), ec);
    Add(counters_.bytes_in, n);
    if (ec) co_return Fail(ec, "a reply");
    if (in_place) {
      parser_.CommitInPlace(n);
    } else {
      buffered_ = std::string_view(into.data(), n);
    }
  }
  Disarm();
  co_return replies;
}

Status NodeConnection::Drain(std::vector<resp::Reply>& replies, size_t wanted) {
  while (replies.size() < wanted && !buffered_.empty()) {
    const Result<size_t> consumed = parser_.Feed(buffered_);
    if (!consumed.ok()) {
      Disarm();
      Close();
      return DeviceError(node_.ToString() +
                         " sent a malformed reply: " + consumed.status().message());
    }
    buffered_.remove_prefix(*consumed);
    if (!parser_.has_reply()) continue;
    resp::Reply reply = parser_.TakeReply();
    // RESP3 pushes are not answers; kvtier never subscribes, but a server may still send one.
    if (reply.type != resp::ReplyType::kPush) replies.push_back(std::move(reply));
  }
  return Status::Ok();
}

}  // namespace kvtier::tiers::remote
