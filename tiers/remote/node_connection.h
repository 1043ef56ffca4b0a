// NodeConnection: one TCP connection to one Redis node, for pipelined batches of commands.
//
// Open() resolves the node's host name (on a thread of its own: getaddrinfo has no timeout, and
// the deadline must hold while a DNS server does not answer), connects (with TLS: and completes
// the handshake, verifying the node's certificate), authenticates and, for a cluster node, asks
// for replica reads (READONLY);
// Exchange() writes a whole CommandBatch and reads its replies,
// one per command, in order. One exchange at a time (the pool in ClusterNode hands a connection to
// one caller). Every operation has a deadline: when it passes, the socket is closed, which ends the
// pending read or write, and the operation answers kTimeout. After any error the position in the
// reply stream is unknown, so the connection is unusable from then on and the pool drops it.
//
// Boost errors are translated here, where they enter: kTimeout for a passed deadline, kDeviceError
// for a refused, reset or closed connection or bytes that are not RESP (each message names the
// node), kPermissionDenied when the node refuses AUTH (the message never contains the password).
//
// Lives on the client's I/O thread: every method, and the coroutines, run there; only a host
// name's getaddrinfo runs on a thread of its own, which nobody joins (it cannot be cancelled) and
// which wakes the connection only while the connection exists. Held by shared_ptr because a
// deadline timer's handler may outlive the caller's use of it.
#pragma once

#include <netdb.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/host_lookup.h"
#include "common/resp/reply.h"
#include "common/resp/reply_parser.h"
#include "common/status.h"
#include "tiers/remote/asio.h"
#include "tiers/remote/command_batch.h"
#include "tiers/remote/redis_endpoint.h"
#include "tiers/remote/remote_stats.h"

namespace kvtier::tiers::remote {

struct ConnectionOptions {
  std::string user;      // empty: AUTH <password> (the default user)
  std::string password;  // empty: no AUTH
  // Cluster nodes only: READONLY after AUTH, so that a replica answers reads of its master's slots
  // instead of redirecting them (a master ignores it).
  bool read_only = false;
  resp::ReplyParser::Options parser;
  // rediss://: TLS over the TCP connection with this context (tls_context.h), each node's
  // certificate checked against tls_server_name, or the node's host when that is empty.
  std::shared_ptr<asio::ssl::context> tls;
  std::string tls_server_name;
  // Resolves a node's host name, on a resolver thread (common/host_lookup.h: at most
  // kMaxResolverThreads in a process; past it, opening a connection to a node named by a host
  // name fails at once with kBusy). Tests stand in a slow resolver.
  AddrInfoFunction resolve = ::getaddrinfo;
};

class NodeConnection : public std::enable_shared_from_this<NodeConnection> {
 public:
  // `options` and `counters` must outlive the connection.
  NodeConnection(asio::io_context& io, HostPort node, const ConnectionOptions& options,
                 RemoteCounters& counters);
  ~NodeConnection();

  // Resolves, connects and (with a password) authenticates by `deadline`. Errors: kTimeout (the
  // resolver too is given up at the deadline), kDeviceError (no such host, refused),
  // kPermissionDenied (AUTH refused: the node's words), kBusy (kMaxResolverThreads lookups are
  // still waiting for the resolver).
  Awaitable<Status> Open(Deadline deadline);

  // Sends `batch` in one write and reads batch.commands() replies. An error reply of a command is
  // a Reply of type kError, not a failed exchange. Errors: kTimeout, kDeviceError; either leaves
  // the connection unusable.
  Awaitable<Result<std::vector<resp::Reply>>> Exchange(const CommandBatch& batch,
                                                       Deadline deadline);

  // Closes the socket now: a pending Open or Exchange ends with an error. Idempotent.
  void Close();
  bool usable() const { return connected_ && !broken_; }
  // For a connection taken from the idle pool: usable, and the node has not closed it meanwhile
  // (Redis's `timeout`, a restart). An idle connection has nothing to read, so end-of-stream or
  // (without TLS) any bytes waiting mean it cannot serve a call; it is then marked unusable.
  // Under TLS, where bytes may wait on a healthy connection, the peer's end of the stream is
  // told by poll's POLLRDHUP, bytes (its close_notify) before it or not.
  bool StillOpenWhileIdle();
  const HostPort& node() const { return node_; }

 private:
  void ArmDeadline(Deadline deadline);
  void Disarm();
  Status Fail(const boost::system::error_code& ec, std::string_view what);
  Awaitable<Status> Connect(Deadline deadline);
  // The first address of the node's host name, from options_.resolve on a thread of its own,
  // waited for until the armed deadline passes or Close() is called.
  Awaitable<Result<asio::ip::tcp::endpoint>> Resolve();
  Awaitable<Status> Handshake();
  // The TCP socket, under TLS or not.
  asio::ip::tcp::socket& Socket() { return tls_ ? tls_->next_layer() : socket_; }
  // One read or one whole write, through TLS when it is on.
  Awaitable<size_t> ReadSome(asio::mutable_buffer buffer, boost::system::error_code& ec);
  Awaitable<size_t> WriteAll(const std::vector<asio::const_buffer>& buffers,
                             boost::system::error_code& ec);
  Awaitable<Status> Authenticate(Deadline deadline);
  // Parses buffered bytes into `replies` until `wanted` are there or the bytes run out.
  Status Drain(std::vector<resp::Reply>& replies, size_t wanted);

  static constexpr size_t kReadBufferBytes = 64 << 10;
  // A value with at least this much left to arrive is read in place (ReplyParser::BeginInPlace),
  // in reads of up to kInPlaceRoomBytes: the room is zeroed before the kernel fills it, so it is
  // kept to about what one read of a loopback or LAN socket returns.
  static constexpr size_t kInPlaceReadBytes = 16 << 10;
  static constexpr size_t kInPlaceRoomBytes = 1 << 20;

  HostPort node_;
  const ConnectionOptions& options_;
  RemoteCounters& counters_;
  // Resolve() waits on it until the lookup's thread, or Close() (which the deadline calls),
  // cancels it.
  asio::steady_timer lookup_wait_;
  std::shared_ptr<HostLookup> lookup_;  // the one lookup of Open; shared with its thread
  asio::ip::tcp::socket socket_;                                   // without TLS
  std::unique_ptr<asio::ssl::stream<asio::ip::tcp::socket>> tls_;  // with TLS: owns its socket
  asio::steady_timer timer_;
  resp::ReplyParser parser_;
  std::unique_ptr<std::array<char, kReadBufferBytes>> read_buf_;
  std::string_view buffered_;  // received, not yet parsed; points into read_buf_
  uint64_t generation_ = 0;    // of the armed deadline; a stale timer handler does nothing
  bool timed_out_ = false;     // the armed deadline passed and closed the socket
  bool connected_ = false;
  bool broken_ = false;
};

}  // namespace kvtier::tiers::remote
