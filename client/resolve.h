// Host name resolution for tcp:// endpoints, bounded in time. getaddrinfo has no timeout of its
// own: with a DNS server down, glibc's resolver waits out its retries (/etc/resolv.conf: 5 s per
// try, per server) and a connect, or an engine's reconnect, would hang that long whatever the
// client's timeout said.
#pragma once

#include <netdb.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace kvtier::client {

struct AddrInfoFree {
  void operator()(addrinfo* list) const { ::freeaddrinfo(list); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoFree>;

// getaddrinfo's signature, so that tests can stand in a slow resolver.
using AddrInfoFunction =
    std::function<int(const char* host, const char* port, const addrinfo* hints, addrinfo** list)>;

// Resolver threads that may run at once in a process (callers that gave up included); past it a
// lookup of a name fails at once with kBusy.
inline constexpr int kMaxResolverThreads = 8;
// The resolver threads running now.
int RunningResolverThreads();

// The stream addresses of `host`:`port`. A numeric address is converted in place; a name is
// resolved on a thread of its own, waited for at most `timeout` (0: no bound, resolved on the
// calling thread). kTimeout when the resolver has not answered by then: the thread is left to
// finish and frees its late answer itself. kNotFound for a name the resolver does not know;
// kBusy while kMaxResolverThreads lookups are still running.
Result<AddrInfoList> ResolveStream(const std::string& host, uint16_t port,
                                   std::chrono::milliseconds timeout,
                                   const AddrInfoFunction& resolve = ::getaddrinfo);

}  // namespace kvtier::client
