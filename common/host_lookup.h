// Host name lookups bounded in time. getaddrinfo has no timeout of its own and cannot be
// cancelled: with a DNS server down, glibc waits out its retries (/etc/resolv.conf: 5 s per try,
// per server), and a connect would hang that long whatever its caller's deadline said. A
// HostLookup runs getaddrinfo on a thread of its own that nobody joins; the caller waits for the
// answer only as long as it wants (the client library until its connect timeout, a remote-tier
// connection until its deadline), and whichever of the two is done with the lookup last frees it,
// a late answer included.
//
// At most kMaxResolverThreads such threads run at once in a process, those whose caller gave up
// included: while the DNS server does not answer each runs for glibc's whole retry time, and a
// caller that reconnects in a loop would otherwise pile them up without bound.
#pragma once

#include <netdb.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace kvtier {

struct AddrInfoFree {
  void operator()(addrinfo* list) const { ::freeaddrinfo(list); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoFree>;

// getaddrinfo's signature, so that tests can stand in a slow resolver.
using AddrInfoFunction =
    std::function<int(const char* host, const char* port, const addrinfo* hints, addrinfo** list)>;

inline constexpr int kMaxResolverThreads = 8;
// The resolver threads running now.
int RunningResolverThreads();

// getaddrinfo's hints for stream sockets of either family, with `flags` (AI_NUMERICSERV, ...).
addrinfo StreamHints(int flags);

class HostLookup {
 public:
  struct Answer {
    int rc = 0;         // getaddrinfo's: 0, or an EAI_* code (gai_strerror)
    AddrInfoList list;  // the addresses, when rc is 0
  };

  // Starts looking `host` up (with a numeric `service`, AI_NUMERICSERV) with `resolve`, on a new
  // thread named kvtier-resolve. `on_answer`, when given, runs on that thread once the answer is
  // in, unless Abandon() came first. Errors: kBusy while kMaxResolverThreads lookups are still
  // running; kDeviceError when the process can start no thread (at its limit), so that the
  // caller may resolve where it is instead.
  static Result<std::shared_ptr<HostLookup>> Start(const std::string& host,
                                                   const std::string& service,
                                                   AddrInfoFunction resolve,
                                                   std::function<void()> on_answer = {});

  // Waits up to `timeout` for the answer; true once it is in.
  bool WaitFor(std::chrono::milliseconds timeout);
  // The caller stops waiting: on_answer does not run after this returns.
  void Abandon();
  // The answer once it is in (nullopt before), moved out: the first call has it.
  std::optional<Answer> Take();

 private:
  HostLookup() = default;

  Mutex mu_;
  std::condition_variable_any answered_;
  bool done_ GUARDED_BY(mu_) = false;
  Answer answer_ GUARDED_BY(mu_);
  std::function<void()> on_answer_ GUARDED_BY(mu_);  // empty once abandoned
};

}  // namespace kvtier
