#include "tiers/remote/redis_endpoint.h"

#include <charconv>

namespace kvtier::tiers::remote {
namespace {

constexpr std::string_view kScheme = "redis://";
constexpr std::string_view kTlsScheme = "rediss://";

Status BadEntry(std::string_view text, std::string_view why) {
  return InvalidArgument("remote seed '" + std::string(text) + "': " + std::string(why));
}

}  // namespace

std::string HostPort::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<HostPort> ParseHostPort(std::string_view text) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return BadEntry(text, "expected [ipv6]:port");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return BadEntry(text, "expected host:port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return BadEntry(text, "an IPv6 address goes in brackets: [ipv6]:port");
    }
  }
  if (host.empty()) return BadEntry(text, "empty host");
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535) {
    return BadEntry(text, "the port must be a number from 1 to 65535");
  }
  return HostPort{std::string(host), static_cast<uint16_t>(value)};
}

Result<RemoteUrl> ParseRemoteUrl(std::string_view url) {
  RemoteUrl out;
  const size_t scheme_end = url.find("://");
  if (scheme_end != std::string_view::npos) {
    const std::string_view scheme = url.substr(0, scheme_end + 3);
    if (scheme != kScheme && scheme != kTlsScheme) {
      return InvalidArgument("remote URL: only redis:// and rediss:// (TLS) are supported (got '" +
                             std::string(scheme) + "')");
    }
    out.tls = scheme == kTlsScheme;
    url.remove_prefix(scheme.size());
  }
  // A user, if any, ends at the last '@' (an entry never contains one).
  if (const size_t at = url.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = url.substr(0, at);
    if (userinfo.find(':') != std::string_view::npos) {
      return InvalidArgument(
          "remote URL carries a password; put it in the config file (remote.password) or in "
          "KVTIER_REMOTE_PASSWORD instead");
    }
    if (userinfo.empty()) return InvalidArgument("remote URL: empty user before '@'");
    out.user = std::string(userinfo);
    url.remove_prefix(at + 1);
  }
  while (!url.empty()) {
    const size_t comma = url.find(',');
    KVTIER_ASSIGN_OR_RETURN(HostPort seed, ParseHostPort(url.substr(0, comma)));
    out.seeds.push_back(std::move(seed));
    if (comma == std::string_view::npos) break;
    url.remove_prefix(comma + 1);
    if (url.empty()) return InvalidArgument("remote URL: empty seed after ','");
  }
  if (out.seeds.empty()) return InvalidArgument("remote URL: no host:port");
  return out;
}

}  // namespace kvtier::tiers::remote
