// ListenAddress: what kvtierd accepts as the host of a TCP listener (RESP or HTTP).
//
// A listener binds an address, not a name: resolving a name at start would make the daemon's
// start wait on DNS, and a name that resolves to several addresses would bind only one of them.
// "localhost" is the one name taken, as the loopback address 127.0.0.1. The configuration, the
// RESP listeners and the HTTP server all decide it here, so a host that one of them takes the
// others take too.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier {

// Returns `host` as a numeric IPv4 or IPv6 address ("localhost" becomes "127.0.0.1").
// Errors: kInvalidArgument naming `key` (the setting, e.g. "listen.tcp_host") and the host.
Result<std::string> ListenAddress(std::string_view key, const std::string& host);

// Whether `host` (an address as ListenAddress returns it, or "localhost") is a loopback address:
// 127.0.0.0/8, or ::1 however written.
bool IsLoopbackAddress(const std::string& host);

// Whether `host` is the address of every interface: 0.0.0.0, or :: however written.
bool IsWildcardAddress(const std::string& host);

}  // namespace kvtier
