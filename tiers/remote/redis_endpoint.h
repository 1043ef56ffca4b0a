// Where a Redis Cluster (or a single Redis/Valkey server) is: the seed list of the remote tier.
//
// Operators write `redis://[user@]host:port[,host:port...]` (`rediss://` for TLS) or just
// `host:port[,host:port...]` (IPv6 hosts in brackets). The password is never part of it: a URL ends
// up on command lines, in process listings and in logs, so it comes from the config file or
// KVTIER_REMOTE_PASSWORD instead, and a URL that carries one is refused. Pure functions; any
// thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvtier::tiers::remote {

struct HostPort {
  std::string host;
  uint16_t port = 0;

  // "host:port", or "[v6]:port"; also the name of a node in logs, stats and maps.
  std::string ToString() const;
  auto operator<=>(const HostPort&) const = default;
};

struct RemoteUrl {
  std::vector<HostPort> seeds;  // at least one
  std::string user;             // empty: the server's default user
  bool tls = false;             // rediss://: every connection is TLS
};

// Parses "host:port" (a port of 1..65535; "[::1]:7000" for IPv6). kInvalidArgument naming `text`.
Result<HostPort> ParseHostPort(std::string_view text);

// Parses a seed list with or without the redis:// scheme. kInvalidArgument for an empty list, an
// entry that is not host:port, another scheme than redis:// or rediss://, or a password in
// the URL (the message says where the password goes instead, and does not repeat it).
Result<RemoteUrl> ParseRemoteUrl(std::string_view url);

}  // namespace kvtier::tiers::remote
