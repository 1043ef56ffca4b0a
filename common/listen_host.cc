#include "common/listen_host.h"

#include <arpa/inet.h>
#include <netinet/in.h>

namespace kvtier {

Result<std::string> ListenAddress(std::string_view key, const std::string& host) {
  if (host == "localhost") return std::string("127.0.0.1");
  in6_addr addr{};
  if (inet_pton(AF_INET, host.c_str(), &addr) == 1 ||
      inet_pton(AF_INET6, host.c_str(), &addr) == 1) {
    return host;
  }
  return InvalidArgument(std::string(key) + ": '" + host + "' is not an IP address or 'localhost'");
}

bool IsLoopbackAddress(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

bool IsWildcardAddress(const std::string& host) {
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return v4.s_addr == INADDR_ANY;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_UNSPECIFIED(&v6);
}

}  // namespace kvtier
