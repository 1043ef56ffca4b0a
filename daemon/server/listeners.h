// Opening the server's listening sockets, and the checks made on each accepted client before it
// gets a connection.
//
// Errors name the address ("unix socket /run/kvtier.sock: bind: ..."), because the operator reads
// them at start-up. Functions that take an io_context create objects bound to it; everything else
// is a pure system-call wrapper. Called from the owner's thread (opening) or an I/O thread
// (per-client checks).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/server/asio.h"

namespace kvtier::server {

// "localhost" or an IPv4/IPv6 literal. kInvalidArgument naming tcp_host otherwise: no name lookup
// is done, so the address the daemon binds is exactly the one configured.
Result<boost::asio::ip::address> ParseTcpHost(const std::string& host);

// Binds `path` (replacing a stale socket file that nobody listens on), sets its mode to `mode` and
// listens. The mode is set between bind and listen, so no client can connect through wider
// permissions. Errors: kInvalidArgument when the path is too long or is another kind of file;
// kBusy when a server already listens there; bind/listen errors translated from errno.
Result<boost::asio::local::stream_protocol::acceptor> OpenUnixListener(
    boost::asio::io_context& io, const std::string& path, uint32_t mode);

// Binds address:port (port 0: the kernel picks one) with SO_REUSEADDR and listens.
Result<boost::asio::ip::tcp::acceptor> OpenTcpListener(boost::asio::io_context& io,
                                                       const boost::asio::ip::address& address,
                                                       uint16_t port);

// The uid of the process at the other end of a Unix socket (SO_PEERCRED); nullopt on error.
std::optional<uid_t> PeerUid(int socket_fd);

// Best effort, without blocking: a one-line error reply to a client that is about to be closed.
void SendRefusal(int socket_fd, std::string_view line);

}  // namespace kvtier::server
