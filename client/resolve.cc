#include "client/resolve.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

namespace kvtier::client {
namespace {

addrinfo StreamHints(int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  return hints;
}

Status ResolveError(const std::string& host, int rc) {
  return NotFound("cannot resolve '" + host + "': " + ::gai_strerror(rc));
}

Result<AddrInfoList> ResolveHere(const std::string& host, const std::string& port,
                                 const AddrInfoFunction& resolve) {
  const addrinfo hints = StreamHints(AI_NUMERICSERV);
  addrinfo* list = nullptr;
  const int rc = resolve(host.c_str(), port.c_str(), &hints, &list);
  if (rc != 0) return ResolveError(host, rc);
  return AddrInfoList(list);
}

// Resolver threads still running in this process, including those whose callers gave up: while
// the DNS server is down each runs for glibc's whole retry time, and an engine that reconnects in
// a loop would otherwise pile them up without bound.
std::atomic<int> resolver_threads{0};

// Shared between the caller and the resolving thread, so that whichever finishes last frees it
// (and the answer, if the caller stopped waiting).
struct PendingLookup {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  int rc = 0;
  AddrInfoList list;
};

}  // namespace

int RunningResolverThreads() { return resolver_threads.load(); }

Result<AddrInfoList> ResolveStream(const std::string& host, uint16_t port,
                                   std::chrono::milliseconds timeout,
                                   const AddrInfoFunction& resolve) {
  const std::string service = std::to_string(port);
  // An address needs no resolver (and no thread): AI_NUMERICHOST never touches the network.
  const addrinfo numeric = StreamHints(AI_NUMERICHOST | AI_NUMERICSERV);
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), service.c_str(), &numeric, &list) == 0) return AddrInfoList(list);
  if (timeout.count() <= 0) return ResolveHere(host, service, resolve);

  if (resolver_threads.fetch_add(1) >= kMaxResolverThreads) {
    resolver_threads.fetch_sub(1);
    return Busy("resolving '" + host + "': " + std::to_string(kMaxResolverThreads) +
                " earlier lookups are still waiting for the resolver (is the DNS server "
                "reachable? an address instead of a name avoids it)");
  }
  auto pending = std::make_shared<PendingLookup>();
  try {
    std::thread([pending, host, service, resolve] {
      const addrinfo hints = StreamHints(AI_NUMERICSERV);
      addrinfo* answer = nullptr;
      const int rc = resolve(host.c_str(), service.c_str(), &hints, &answer);
      std::lock_guard lock(pending->mu);
      pending->rc = rc;
      pending->list.reset(rc == 0 ? answer : nullptr);
      pending->done = true;
      pending->done_cv.notify_all();
      resolver_threads.fetch_sub(1);
    }).detach();
  } catch (const std::system_error&) {
    resolver_threads.fetch_sub(1);
    // No thread to be had (a process at its thread limit): resolve here, unbounded as before,
    // rather than fail a connect that the resolver may answer at once.
    return ResolveHere(host, service, resolve);
  }
  std::unique_lock lock(pending->mu);
  if (!pending->done_cv.wait_for(lock, timeout, [&] { return pending->done; })) {
    return Timeout("resolving '" + host + "' took more than " + std::to_string(timeout.count()) +
                   " ms (is the DNS server reachable? an address instead of a name avoids it)");
  }
  if (pending->rc != 0) return ResolveError(host, pending->rc);
  return std::move(pending->list);
}

}  // namespace kvtier::client
