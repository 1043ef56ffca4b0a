// Resolving tcp:// host names within the connect timeout, against a stand-in resolver (a test
// cannot make the system's DNS slow).
#include "client/resolve.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "common/testing/slow_resolver.h"

namespace kvtier::client {
namespace {

using kvtier::testing::SlowResolver;
using std::chrono::milliseconds;

uint16_t PortOf(const addrinfo& ai) {
  return ntohs(reinterpret_cast<const sockaddr_in*>(ai.ai_addr)->sin_port);
}

TEST(ResolveTest, AnAddressNeedsNoResolver) {
  SlowResolver resolver{milliseconds(0)};
  for (const char* host : {"127.0.0.1", "::1"}) {
    auto list = ResolveStream(host, 6380, milliseconds(100), resolver.Function());
    ASSERT_TRUE(list.ok()) << host << ": " << list.status().ToString();
    EXPECT_EQ((*list)->ai_socktype, SOCK_STREAM);
  }
  EXPECT_EQ(*resolver.started, 0);
}

TEST(ResolveTest, ANameResolvedInTimeGivesItsAddresses) {
  SlowResolver resolver{milliseconds(0)};
  auto list = ResolveStream("kvtierd.example", 6380, milliseconds(5000), resolver.Function());
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ((*list)->ai_family, AF_INET);
  EXPECT_EQ(PortOf(**list), 6380);
  EXPECT_EQ(*resolver.started, 1);
}

// Regression: milliseconds::max() (a caller's "no real limit") wrapped to a deadline already past
// when added to the clock, and every host name timed out at once.
TEST(ResolveTest, TheLongestTimeoutWaitsForTheResolver) {
  SlowResolver resolver{milliseconds(50)};
  auto list = ResolveStream("kvtierd.example", 6380, milliseconds::max(), resolver.Function());
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(PortOf(**list), 6380);
}

// Regression: a resolver that hung (a DNS server down) held the connect for as long as glibc's
// retries took, whatever the client's timeout said.
TEST(ResolveTest, AResolverSlowerThanTheTimeoutIsATimeout) {
  SlowResolver resolver{milliseconds(1500)};
  const auto start = std::chrono::steady_clock::now();
  auto list = ResolveStream("kvtierd.example", 6380, milliseconds(50), resolver.Function());
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), StatusCode::kTimeout);
  EXPECT_NE(list.status().message().find("resolving 'kvtierd.example'"), std::string::npos)
      << list.status().ToString();
  // The call returned while the resolver still ran (it sleeps 1.5 s; a returned call that had
  // waited for it would find `finished` at 1).
  EXPECT_EQ(*resolver.finished, 0)
      << "returned after " << std::chrono::duration<double>(waited).count() << " s";
  // The late answer is freed by the resolving thread (an ASan run would report it otherwise).
  while (*resolver.finished == 0) std::this_thread::sleep_for(milliseconds(10));
}

// While the DNS server is down every lookup's thread runs long after its caller gave up; a
// client that reconnects in a loop must not pile them up without bound.
TEST(ResolveTest, ResolverThreadsAreCapped) {
  for (int waits = 0; RunningResolverThreads() > 0 && waits < 500; ++waits) {
    std::this_thread::sleep_for(milliseconds(10));  // those of the tests before
  }
  ASSERT_EQ(RunningResolverThreads(), 0);
  SlowResolver resolver{milliseconds(1000)};
  for (int i = 0; i < kMaxResolverThreads; ++i) {
    auto list = ResolveStream("kvtierd.example", 6380, milliseconds(1), resolver.Function());
    ASSERT_EQ(list.status().code(), StatusCode::kTimeout) << i << ": " << list.status().ToString();
  }
  auto refused = ResolveStream("kvtierd.example", 6380, milliseconds(1), resolver.Function());
  EXPECT_EQ(refused.status().code(), StatusCode::kBusy) << refused.status().ToString();
  // An address needs no thread, and is still converted.
  EXPECT_TRUE(ResolveStream("127.0.0.1", 6380, milliseconds(1), resolver.Function()).ok());
  // Once the resolver answers, the threads end and a name is resolved again.
  for (int waits = 0; RunningResolverThreads() > 0 && waits < 500; ++waits) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(RunningResolverThreads(), 0);
  SlowResolver quick{milliseconds(0)};
  EXPECT_TRUE(ResolveStream("kvtierd.example", 6380, milliseconds(5000), quick.Function()).ok());
}

TEST(ResolveTest, NoTimeoutResolvesOnTheCallingThread) {
  SlowResolver resolver{milliseconds(0)};
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id resolved_on;
  auto list =
      ResolveStream("kvtierd.example", 1, milliseconds(0),
                    [&](const char* host, const char* port, const addrinfo* hints, addrinfo** out) {
                      resolved_on = std::this_thread::get_id();
                      return resolver.Function()(host, port, hints, out);
                    });
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(resolved_on, caller);
}

TEST(ResolveTest, AnUnknownNameIsNotFound) {
  auto list = ResolveStream(
      "kvtierd.example", 6380, milliseconds(5000),
      [](const char*, const char*, const addrinfo*, addrinfo**) { return EAI_NONAME; });
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), StatusCode::kNotFound);
  EXPECT_NE(list.status().message().find("cannot resolve 'kvtierd.example'"), std::string::npos)
      << list.status().ToString();
}

}  // namespace
}  // namespace kvtier::client
