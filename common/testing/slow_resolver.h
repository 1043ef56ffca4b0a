// Stand-in resolvers for the host-name lookup tests: a test cannot make the system's DNS slow.
#pragma once

#include <netdb.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "common/host_lookup.h"

namespace kvtier::testing {

// Answers 127.0.0.1 after `delay`, counting the lookups started and finished (shared by every copy
// of its Function(), which may outlive the test's call on an abandoned lookup's thread).
struct SlowResolver {
  std::chrono::milliseconds delay;
  std::shared_ptr<std::atomic<int>> started = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> finished = std::make_shared<std::atomic<int>>(0);

  AddrInfoFunction Function() const {
    return [delay = delay, started = started, finished = finished](
               const char*, const char* port, const addrinfo* hints, addrinfo** list) {
      ++*started;
      std::this_thread::sleep_for(delay);
      const int rc = ::getaddrinfo("127.0.0.1", port, hints, list);
      ++*finished;
      return rc;
    };
  }
};

// Answers 127.0.0.1 once `release` is set.
inline AddrInfoFunction HeldResolver(std::shared_future<void> release) {
  return [release](const char*, const char* port, const addrinfo* hints, addrinfo** list) {
    release.wait();
    return ::getaddrinfo("127.0.0.1", port, hints, list);
  };
}

}  // namespace kvtier::testing
