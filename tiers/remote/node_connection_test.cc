// NodeConnection's name lookups, against a stand-in resolver (a test cannot make the system's DNS
// slow) and a fake cluster node to connect to.
#include "tiers/remote/node_connection.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "tiers/remote/testing/fake_cluster_node.h"
#include "tiers/remote/testing/redis_process.h"

namespace kvtier::tiers::remote {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A resolver that answers 127.0.0.1 after `delay`, counting the lookups finished.
struct SlowResolver {
  milliseconds delay;
  std::shared_ptr<std::atomic<int>> finished = std::make_shared<std::atomic<int>>(0);

  decltype(ConnectionOptions::resolve) Function() const {
    return [delay = delay, finished = finished](const char*, const char* port,
                                                const addrinfo* hints, addrinfo** list) {
      std::this_thread::sleep_for(delay);
      const int rc = ::getaddrinfo("127.0.0.1", port, hints, list);
      ++*finished;
      return rc;
    };
  }
};

// Opens `conn` by `deadline` on `io` and returns Open's answer once the io_context has run out of
// work.
Status OpenAndRun(asio::io_context& io, const std::shared_ptr<NodeConnection>& conn,
                  Deadline deadline) {
  Status opened = Internal("Open did not finish");
  asio::co_spawn(
      io, [&]() -> Awaitable<void> { opened = co_await conn->Open(deadline); }, asio::detached);
  io.run();
  return opened;
}

TEST(NodeConnection, AHostNameResolvedInTimeIsConnectedTo) {
  auto node = testing::FakeClusterNode::Start();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  asio::io_context io;
  RemoteCounters counters;
  ConnectionOptions options;
  SlowResolver resolver{milliseconds(0)};
  options.resolve = resolver.Function();
  auto conn = std::make_shared<NodeConnection>(
      io, HostPort{"redis-0.example", (*node)->address().port}, options, counters);
  const Status opened = OpenAndRun(io, conn, Clock::now() + milliseconds(5000));
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  EXPECT_EQ(*resolver.finished, 1);
  EXPECT_TRUE(
      testing::PollUntil(milliseconds(5000), [&] { return (*node)->open_connections() > 0; }));
}

// Regression: the lookup of a node's host name (a cluster that announces host names) went
// through Asio's resolver, whose awaited answer comes only when getaddrinfo returns: with a DNS
// server that did not answer, a connection, and with it the call or the slot-map read, waited
// for glibc's whole retry time, past its deadline.
TEST(NodeConnection, AResolverSlowerThanTheDeadlineIsATimeoutAtTheDeadline) {
  asio::io_context io;
  RemoteCounters counters;
  ConnectionOptions options;
  SlowResolver resolver{milliseconds(1500)};
  options.resolve = resolver.Function();
  auto conn =
      std::make_shared<NodeConnection>(io, HostPort{"redis-0.example", 6379}, options, counters);
  const auto start = Clock::now();
  const Status opened = OpenAndRun(io, conn, start + milliseconds(100));
  const auto waited = Clock::now() - start;
  EXPECT_EQ(opened.code(), StatusCode::kTimeout) << opened.ToString();
  // Back at the deadline, while the resolver still runs (it sleeps 1.5 s).
  EXPECT_LT(waited, milliseconds(1000))
      << std::chrono::duration_cast<milliseconds>(waited).count() << " ms";
  EXPECT_EQ(*resolver.finished, 0);
  // The connection goes before the late answer comes; the lookup's thread frees it (an ASan run
  // would report it otherwise) and must not touch the connection or the io_context.
  conn.reset();
  while (*resolver.finished == 0) std::this_thread::sleep_for(milliseconds(10));
}

}  // namespace
}  // namespace kvtier::tiers::remote
