// Endpoint: where a kvtierd listens, parsed from the URL a user gives `Client::Connect` or
// `kvtier --url`.
//
//   unix:///run/user/1000/kvtier/kvtierd.sock   a Unix socket (the path after "unix://")
//   tcp://127.0.0.1:6379                       a TCP address; host a name, IPv4, or [IPv6]
//   tcp://[::1]:6379
//
// Only the Unix socket carries the shared-memory path (KVT.ATTACH passes a file descriptor); TCP
// clients send payloads inline. Parsing is a pure function, safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier::client {

struct Endpoint {
  enum class Kind : uint8_t { kUnix, kTcp };

  Kind kind = Kind::kUnix;
  std::string path;  // kUnix: the socket path
  std::string host;  // kTcp: the host, without brackets for IPv6
  uint16_t port = 0;  // kTcp
  std::string url;   // the URL as given, for messages

  bool is_unix() const { return kind == Kind::kUnix; }
};

// Longest Unix socket path the kernel accepts (sizeof(sockaddr_un::sun_path) - 1).
inline constexpr size_t kMaxUnixPathBytes = 107;

// Parses `url`. Errors: kInvalidArgument whose message quotes the URL and says what is wrong
// (unknown scheme, empty or too long path, missing host, missing or out-of-range port, anything
// after the port). The caller should fix the URL; retrying cannot help.
Result<Endpoint> ParseUrl(std::string_view url);

}  // namespace kvtier::client
