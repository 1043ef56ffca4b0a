// Host name resolution for tcp:// endpoints, bounded in time by the connect timeout: the lookup
// runs as a common/host_lookup.h HostLookup (a thread of its own, at most kMaxResolverThreads of
// them), since getaddrinfo has no timeout and an engine's reconnect would otherwise hang for as
// long as glibc's retries take while a DNS server is down.
#pragma once

#include <netdb.h>

#include <chrono>
#include <string>

#include "common/host_lookup.h"
#include "common/status.h"

namespace kvtier::client {

// The stream addresses of `host`:`port`. A numeric address is converted in place; a name is
// resolved on a thread of its own, waited for at most `timeout` (0: no bound, resolved on the
// calling thread). kTimeout when the resolver has not answered by then: the thread is left to
// finish and frees its late answer itself. kNotFound for a name the resolver does not know;
// kBusy while kMaxResolverThreads lookups are still running.
Result<AddrInfoList> ResolveStream(const std::string& host, uint16_t port,
                                   std::chrono::milliseconds timeout,
                                   const AddrInfoFunction& resolve = ::getaddrinfo);

}  // namespace kvtier::client
