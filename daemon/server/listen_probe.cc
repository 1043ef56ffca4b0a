#include "daemon/server/listen_probe.h"

#include <unistd.h>

#include "daemon/server/listeners.h"

namespace kvtier::server {

Status ProbeUnixListener(const std::string& path, uint32_t mode) {
  boost::asio::io_context io;
  KVTIER_ASSIGN_OR_RETURN(boost::asio::local::stream_protocol::acceptor acceptor,
                          OpenUnixListener(io, path, mode));
  // Removed while still listening: meanwhile another daemon that looks at the path finds a live
  // server and refuses it, never a stale file to replace, so the unlink cannot remove its socket.
  unlink(path.c_str());
  acceptor.close();
  return Status::Ok();
}

Status ProbeTcpListener(const std::string& host, uint16_t port) {
  if (port == 0) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(boost::asio::ip::address address, ParseTcpHost(host));
  boost::asio::io_context io;
  KVTIER_ASSIGN_OR_RETURN(boost::asio::ip::tcp::acceptor acceptor,
                          OpenTcpListener(io, address, port));
  acceptor.close();
  return Status::Ok();
}

}  // namespace kvtier::server
