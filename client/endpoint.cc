#include "client/endpoint.h"

#include <charconv>
#include <string>

namespace kvtier::client {
namespace {

constexpr std::string_view kUnixScheme = "unix://";
constexpr std::string_view kTcpScheme = "tcp://";

Status BadUrl(std::string_view url, std::string_view why) {
  std::string msg = "bad URL '";
  msg.append(url);
  msg += "': ";
  msg.append(why);
  return InvalidArgument(std::move(msg));
}

Result<Endpoint> ParseUnix(std::string_view url, std::string_view rest) {
  if (rest.empty()) return BadUrl(url, "empty socket path (expected unix:///path/to.sock)");
  if (rest.size() > kMaxUnixPathBytes) {
    return BadUrl(url, "socket path longer than " + std::to_string(kMaxUnixPathBytes) + " bytes");
  }
  if (rest.find('\0') != std::string_view::npos) return BadUrl(url, "NUL byte in socket path");
  Endpoint endpoint;
  endpoint.kind = Endpoint::Kind::kUnix;
  endpoint.path = std::string(rest);
  endpoint.url = std::string(url);
  return endpoint;
}

Result<Endpoint> ParseTcp(std::string_view url, std::string_view rest) {
  std::string_view host;
  std::string_view after_host;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return BadUrl(url, "unclosed '[' in IPv6 host");
    host = rest.substr(1, close - 1);
    after_host = rest.substr(close + 1);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return BadUrl(url, "missing port (expected tcp://host:port)");
    host = rest.substr(0, colon);
    after_host = rest.substr(colon);
    if (host.find(':') != std::string_view::npos) {
      return BadUrl(url, "an IPv6 host must be in brackets (tcp://[::1]:port)");
    }
  }
  if (host.empty()) return BadUrl(url, "missing host (expected tcp://host:port)");
  if (after_host.empty() || after_host.front() != ':') {
    return BadUrl(url, "missing port (expected tcp://host:port)");
  }
  const std::string_view port_text = after_host.substr(1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size()) {
    return BadUrl(url, "port must be a number in [1, 65535] with nothing after it");
  }
  if (port == 0 || port > 65535) return BadUrl(url, "port must be in [1, 65535]");
  Endpoint endpoint;
  endpoint.kind = Endpoint::Kind::kTcp;
  endpoint.host = std::string(host);
  endpoint.port = static_cast<uint16_t>(port);
  endpoint.url = std::string(url);
  return endpoint;
}

}  // namespace

Result<Endpoint> ParseUrl(std::string_view url) {
  if (url.starts_with(kUnixScheme)) return ParseUnix(url, url.substr(kUnixScheme.size()));
  if (url.starts_with(kTcpScheme)) return ParseTcp(url, url.substr(kTcpScheme.size()));
  return BadUrl(url, "expected unix:///path/to.sock or tcp://host:port");
}

}  // namespace kvtier::client
