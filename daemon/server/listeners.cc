#include "daemon/server/listeners.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/listen_host.h"

namespace kvtier::server {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

Status FromErrorCode(const error_code& ec, const std::string& what) {
  if (ec.category() == boost::system::system_category()) return ErrnoStatus(ec.value(), what);
  return DeviceError(what + ": " + ec.message());
}

// True when something accepts connections on the Unix socket at `path`.
bool SomeoneListens(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const bool listening = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return listening;
}

// Removes a socket file left behind by a daemon that died; refuses to touch anything else.
Status ClearStaleSocket(const std::string& path) {
  const std::string where = "unix socket " + path;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? Status::Ok() : ErrnoStatus(errno, where + ": stat");
  }
  if (!S_ISSOCK(st.st_mode)) {
    return InvalidArgument(where + ": the path exists and is not a socket");
  }
  if (SomeoneListens(path)) return Busy(where + ": another server is listening there");
  if (unlink(path.c_str()) != 0) return ErrnoStatus(errno, where + ": remove stale socket");
  return Status::Ok();
}

}  // namespace

Result<asio::ip::address> ParseTcpHost(const std::string& host) {
  KVTIER_ASSIGN_OR_RETURN(const std::string address, ListenAddress("tcp_host", host));
  return asio::ip::make_address(address);  // cannot throw: ListenAddress took it as an address
}

Result<asio::local::stream_protocol::acceptor> OpenUnixListener(asio::io_context& io,
                                                                const std::string& path,
                                                                uint32_t mode) {
  const std::string where = "unix socket " + path;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return InvalidArgument(where + ": longer than " +
                           std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
  }
  KVTIER_RETURN_IF_ERROR(ClearStaleSocket(path));
  asio::local::stream_protocol::acceptor acceptor(io);
  error_code ec;
  acceptor.open(asio::local::stream_protocol(), ec);
  if (ec) return FromErrorCode(ec, where + ": socket");
  acceptor.bind(asio::local::stream_protocol::endpoint(path), ec);
  if (ec) return FromErrorCode(ec, where + ": bind");
  if (chmod(path.c_str(), mode) != 0) return ErrnoStatus(errno, where + ": chmod");
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return FromErrorCode(ec, where + ": listen");
  return acceptor;
}

Result<asio::ip::tcp::acceptor> OpenTcpListener(asio::io_context& io,
                                                const asio::ip::address& address, uint16_t port) {
  const asio::ip::tcp::endpoint endpoint(address, port);
  const std::string where = "tcp " + address.to_string() + ":" + std::to_string(port);
  asio::ip::tcp::acceptor acceptor(io);
  error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (ec) return FromErrorCode(ec, where + ": socket");
  acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (ec) return FromErrorCode(ec, where + ": SO_REUSEADDR");
  acceptor.bind(endpoint, ec);
  if (ec) return FromErrorCode(ec, where + ": bind");
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return FromErrorCode(ec, where + ": listen");
  return acceptor;
}

std::optional<uid_t> PeerUid(int socket_fd) {
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) return std::nullopt;
  return cred.uid;
}

void SendRefusal(int socket_fd, std::string_view line) {
  (void)send(socket_fd, line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace kvtier::server
