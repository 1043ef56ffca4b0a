#include "common/host_lookup.h"

#include <pthread.h>

#include <atomic>
#include <system_error>
#include <thread>

namespace kvtier {
namespace {

std::atomic<int> resolver_threads{0};

}  // namespace

int RunningResolverThreads() { return resolver_threads.load(); }

addrinfo StreamHints(int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  return hints;
}

Result<std::shared_ptr<HostLookup>> HostLookup::Start(const std::string& host,
                                                      const std::string& service,
                                                      AddrInfoFunction resolve,
                                                      std::function<void()> on_answer) {
  if (resolver_threads.fetch_add(1) >= kMaxResolverThreads) {
    resolver_threads.fetch_sub(1);
    return Busy("resolving '" + host + "': " + std::to_string(kMaxResolverThreads) +
                " earlier lookups are still waiting for the resolver (is the DNS server "
                "reachable? an address instead of a name avoids it)");
  }
  std::shared_ptr<HostLookup> lookup(new HostLookup());
  {
    MutexLock lock(lookup->mu_);
    lookup->on_answer_ = std::move(on_answer);
  }
  try {
    std::thread([lookup, host, service, resolve = std::move(resolve)] {
      pthread_setname_np(pthread_self(), "kvtier-resolve");
      const addrinfo hints = StreamHints(AI_NUMERICSERV);
      addrinfo* list = nullptr;
      const int rc = resolve(host.c_str(), service.c_str(), &hints, &list);
      {
        MutexLock lock(lookup->mu_);
        lookup->answer_.rc = rc;
        lookup->answer_.list.reset(rc == 0 ? list : nullptr);
        lookup->done_ = true;
        lookup->answered_.notify_all();
        // Under the lock, so that Abandon() returning means it is not running nor to run.
        if (lookup->on_answer_) lookup->on_answer_();
      }
      resolver_threads.fetch_sub(1);
    }).detach();
  } catch (const std::system_error& e) {
    resolver_threads.fetch_sub(1);
    return DeviceError("resolving '" + host + "': no thread for the lookup: " + e.what());
  }
  return lookup;
}

bool HostLookup::WaitFor(std::chrono::milliseconds timeout) {
  // A timeout past the clock's range (milliseconds::max(), say) waits for ever: added to now in
  // the clock's nanoseconds it would wrap to a deadline already past.
  const auto now = std::chrono::steady_clock::now();
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::time_point::max() - now);
  const auto deadline =
      timeout >= room ? std::chrono::steady_clock::time_point::max() : now + timeout;
  MutexLock lock(mu_);
  // The condition variable unlocks and relocks mu_ itself, which the analysis cannot follow.
  while (!done_) {
    if (answered_.wait_until(mu_, deadline) == std::cv_status::timeout) break;
  }
  return done_;
}

void HostLookup::Abandon() {
  MutexLock lock(mu_);
  on_answer_ = nullptr;
}

std::optional<HostLookup::Answer> HostLookup::Take() {
  MutexLock lock(mu_);
  if (!done_) return std::nullopt;
  return std::move(answer_);
}

}  // namespace kvtier
