#include "client/connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

#include "client/reply_mapping.h"
#include "client/resolve.h"
#include "common/fd_passing.h"
#include "common/paths.h"

namespace kvtier::client {
namespace {

// Most iovecs per sendmsg; well under IOV_MAX (1024), and a batch with more pieces simply takes
// more calls.
constexpr int kMaxIov = 64;
// Bytes read per recvmsg: large enough that a 64 MiB inline payload takes few system calls.
constexpr size_t kReadChunkBytes = size_t{1} << 20;

// poll()'s timeout for a call timeout: -1 (forever) for none, and at most INT_MAX ms (24.8 days)
// rather than a wrapped, shorter or infinite, one.
int TimeoutForPoll(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return -1;
  return static_cast<int>(std::min<int64_t>(timeout.count(), std::numeric_limits<int>::max()));
}

std::string ConnectWhat(const Endpoint& endpoint) { return "connect to " + endpoint.url; }

// The daemon absent is the common mistake; say so next to the errno text.
Status ConnectError(int err, const Endpoint& endpoint) {
  Status status = ErrnoStatus(err, ConnectWhat(endpoint));
  if (err == ENOENT || err == ECONNREFUSED) {
    return Status(status.code(), status.message() + " (is kvtierd running?)");
  }
  return status;
}

// A non-blocking Unix connect completes at once or fails; a full backlog (the daemon stalled or
// not accepting) is EAGAIN, which nothing can poll for, so it is retried with a growing pause
// until the deadline. A blocking connect would wait there with no bound at all.
Result<UniqueFd> ConnectUnix(const Endpoint& endpoint, int timeout_ms) {
  // A socket in the /tmp fallback is trusted only in a directory of this user's (common/paths.h);
  // a missing one is left to connect() to report as no daemon.
  if (InTmpFallbackDir(endpoint.path)) {
    Status private_dir = CheckPrivateDirectory(TmpFallbackDir());
    if (!private_dir.ok() && private_dir.code() != StatusCode::kNotFound) {
      return Status(private_dir.code(), ConnectWhat(endpoint) + ": " + private_dir.message());
    }
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoStatus(errno, "socket for " + endpoint.url);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, endpoint.path.data(), endpoint.path.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return ConnectError(errno, endpoint);
    const auto now = std::chrono::steady_clock::now();
    if (timeout_ms >= 0 && now >= deadline) {
      return Timeout(ConnectWhat(endpoint) + ": kvtierd's accept queue stayed full");
    }
    std::this_thread::sleep_for(
        timeout_ms < 0 ? pause : std::min<std::chrono::nanoseconds>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return fd;
}

// Connects one resolved address without blocking past `timeout_ms` (-1: forever).
Result<UniqueFd> ConnectAddress(const addrinfo& ai, const Endpoint& endpoint, int timeout_ms) {
  UniqueFd fd(
      ::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai.ai_protocol));
  if (!fd.valid()) return ErrnoStatus(errno, "socket for " + endpoint.url);
  if (::connect(fd.get(), ai.ai_addr, ai.ai_addrlen) < 0) {
    if (errno != EINPROGRESS) return ConnectError(errno, endpoint);
    pollfd pfd{fd.get(), POLLOUT, 0};
    int rc;
    do {
      rc = ::poll(&pfd, 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) return Timeout(ConnectWhat(endpoint) + ": no answer in time");
    if (rc < 0) return ErrnoStatus(errno, ConnectWhat(endpoint));
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
    if (err != 0) return ConnectError(err, endpoint);
  }
  // Commands are small and latency-bound; Nagle would hold a batch's tail for an ACK.
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// `timeout` bounds the name's resolution and each address's connect.
Result<UniqueFd> ConnectTcp(const Endpoint& endpoint, std::chrono::milliseconds timeout) {
  Result<AddrInfoList> list = ResolveStream(endpoint.host, endpoint.port, timeout);
  if (!list.ok()) {
    return Status(list.status().code(), ConnectWhat(endpoint) + ": " + list.status().message());
  }
  Status last = NotFound(ConnectWhat(endpoint) + ": no address");
  for (const addrinfo* ai = list->get(); ai != nullptr; ai = ai->ai_next) {
    Result<UniqueFd> fd = ConnectAddress(*ai, endpoint, TimeoutForPoll(timeout));
    if (fd.ok()) return fd;
    last = fd.status();
  }
  return last;
}

}  // namespace

Result<std::unique_ptr<Connection>> Connection::Open(const Endpoint& endpoint,
                                                     const Options& options) {
  const int timeout_ms = TimeoutForPoll(options.timeout);
  Result<UniqueFd> fd = endpoint.is_unix() ? ConnectUnix(endpoint, timeout_ms)
                                           : ConnectTcp(endpoint, options.timeout);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<Connection>(new Connection(endpoint, options, std::move(fd).value()));
}

Connection::Connection(Endpoint endpoint, Options options, UniqueFd fd)
    : endpoint_(std::move(endpoint)),
      options_(options),
      fd_(std::move(fd)),
      parser_(options.parser) {}

int Connection::PollTimeoutMs() const { return TimeoutForPoll(options_.timeout); }

Status Connection::Fail(Status status) {
  if (failure_.ok()) failure_ = status;
  fd_.reset();
  return status;
}

void Connection::AbandonAfterException() noexcept {
  fd_.reset();
  if (!failure_.ok()) return;
  try {
    failure_ = Internal("a call on " + endpoint_.url +
                        " was interrupted by an exception (out of memory?) mid-round-trip");
  } catch (...) {
    // No memory for the message: the code alone still makes every later call fail.
    failure_ = Status(StatusCode::kInternal, std::string());
  }
}

Status Connection::FailureForLaterCall() const {
  return Status(failure_.code(), "connection unusable after earlier error: " + failure_.message());
}

Status Connection::Send(const RequestBuffer& request) {
  if (!failure_.ok()) return FailureForLaterCall();
  const size_t replies_before = replies_.size();
  size_t written = 0;
  const Status sent = SendAll(request, &written);
  if (sent.ok()) return sent;
  // The daemon answers a command it cannot take (a bulk over its limit) with an error and closes
  // without reading the rest, so the write fails: that error is the reply to the command being
  // written, the last one read. An error answering an earlier command of the batch (NOTFOUND for
  // an unknown namespace) has nothing to do with the failure, which is then reported as it is.
  const size_t writing = request.CommandAt(written);
  const size_t answered = replies_.size() - replies_before;
  if (answered == writing + 1 && replies_.back().is_error()) {
    // Later calls on this connection then say why it ended, not how its socket did.
    failure_ = ErrorReplyToStatus(replies_.back(),
                                  "kvtierd refused the request and closed the connection");
    return failure_;
  }
  return sent;
}

void Connection::ReadWhatWasSentBeforeClosing() {
  // The daemon closed after its last reply, so the bytes are all there: each read takes up to
  // 1 MiB, and the end of the stream (or any error) closes the socket and ends the loop. Bounded,
  // should the peer have shut only its reading side.
  for (int reads = 0; reads < 1024 && fd_.valid(); ++reads) {
    if (!ReadAvailable().ok()) return;
  }
}

Status Connection::SendAll(const RequestBuffer& request, size_t* written) {
  *written = 0;
  const std::vector<RequestBuffer::Piece>& pieces = request.pieces();
  size_t index = 0;   // first piece not fully written
  size_t offset = 0;  // bytes of pieces[index] already written
  iovec iov[kMaxIov];
  while (index < pieces.size()) {
    int count = 0;
    for (size_t i = index; i < pieces.size() && count < kMaxIov; ++i, ++count) {
      const size_t skip = i == index ? offset : 0;
      iov[count].iov_base = const_cast<char*>(request.PieceData(pieces[i]) + skip);
      iov[count].iov_len = pieces[i].length - skip;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t sent = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        const int err = errno;
        if (err == EPIPE || err == ECONNRESET) ReadWhatWasSentBeforeClosing();
        return Fail(ErrnoStatus(err, "send to " + endpoint_.url));
      }
      Result<bool> writable = WaitWritableOrRead();
      if (!writable.ok()) return writable.status();
      continue;
    }
    *written += static_cast<size_t>(sent);
    size_t left = static_cast<size_t>(sent);
    while (left > 0) {
      const size_t in_piece = pieces[index].length - offset;
      if (left < in_piece) {
        offset += left;
        break;
      }
      left -= in_piece;
      ++index;
      offset = 0;
    }
  }
  return Status::Ok();
}

Result<bool> Connection::WaitWritableOrRead() {
  pollfd pfd{fd_.get(), POLLIN | POLLOUT, 0};
  int rc;
  do {
    rc = ::poll(&pfd, 1, PollTimeoutMs());
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) return Fail(ErrnoStatus(errno, "poll on " + endpoint_.url));
  if (rc == 0)
    return Fail(Timeout("send to " + endpoint_.url + ": the daemon read nothing in time"));
  if ((pfd.revents & POLLIN) != 0) {
    KVTIER_RETURN_IF_ERROR(ReadAvailable());
    return false;
  }
  // POLLOUT, or POLLERR/POLLHUP: the next sendmsg reports the error.
  return true;
}

Status Connection::WaitAndRead() {
  pollfd pfd{fd_.get(), POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&pfd, 1, PollTimeoutMs());
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) return Fail(ErrnoStatus(errno, "poll on " + endpoint_.url));
  if (rc == 0) return Fail(Timeout("read from " + endpoint_.url + ": no reply in time"));
  return ReadAvailable();
}

Status Connection::ReadAvailable() {
  if (scratch_.empty()) scratch_.resize(kReadChunkBytes);
  std::vector<int> fds;  // only a Unix socket ever carries any (KVT.ATTACH)
  const ssize_t got = ReceiveWithFds(fd_.get(), scratch_, MSG_DONTWAIT, fds);
  for (int fd : fds) received_fds_.emplace_back(fd);
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
    return Fail(ErrnoStatus(errno, "read from " + endpoint_.url));
  }
  if (got == 0) {
    return Fail(DeviceError("connection to " + endpoint_.url + " closed by the daemon"));
  }
  return Feed(scratch_.data(), static_cast<size_t>(got));
}

Status Connection::Feed(const char* data, size_t length) {
  std::string_view input(data, length);
  while (!input.empty()) {
    Result<size_t> used = parser_.Feed(input);
    if (!used.ok()) {
      return Fail(Internal("reply from " + endpoint_.url + ": " + used.status().message()));
    }
    input.remove_prefix(*used);
    if (parser_.has_reply()) {
      resp::Reply reply = parser_.TakeReply();
      if (reply.type != resp::ReplyType::kPush) replies_.push_back(std::move(reply));
    }
  }
  return Status::Ok();
}

Result<resp::Reply> Connection::ReadReply() {
  while (replies_.empty()) {
    if (!failure_.ok()) return FailureForLaterCall();
    KVTIER_RETURN_IF_ERROR(WaitAndRead());
  }
  resp::Reply reply = std::move(replies_.front());
  replies_.pop_front();
  return reply;
}

UniqueFd Connection::TakeReceivedFd() {
  if (received_fds_.empty()) return UniqueFd();
  UniqueFd fd = std::move(received_fds_.front());
  received_fds_.erase(received_fds_.begin());
  return fd;
}

}  // namespace kvtier::client
