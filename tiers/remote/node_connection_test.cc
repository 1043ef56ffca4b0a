// A node's host-name lookup (NodeConnection::Resolve), through RedisClusterClient::Open against a
// fake cluster node, with a stand-in resolver (a test cannot make the system's DNS slow).
// Through Open rather than a NodeConnection of the test's own: clang 14's ASan build cannot emit
// the debug information of a co_spawn of Open in a test ("Cannot represent a difference across
// sections").
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/slow_resolver.h"
#include "tiers/remote/redis_cluster_client.h"
#include "tiers/remote/testing/fake_cluster_node.h"

namespace kvtier::tiers::remote {
namespace {

using kvtier::testing::SlowResolver;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(NodeConnection, AHostNameResolvedInTimeIsConnectedTo) {
  auto node = testing::FakeClusterNode::Start();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  SlowResolver resolver{milliseconds(0)};
  RedisClusterOptions options;
  options.seeds = {HostPort{"redis-0.example", (*node)->address().port}};
  options.connect_timeout = milliseconds(5000);
  options.refresh_interval = milliseconds(0);
  options.resolve = resolver.Function();
  auto client = RedisClusterClient::Open(options);
  // Only the stand-in resolver knows redis-0.example: the seed was reached through it.
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_GE(*resolver.finished, 1);
  EXPECT_EQ((*client)->Masters(), std::vector<std::string>{(*node)->address().ToString()});
}

// Regression: the lookup of a node's host name (a cluster that announces host names) went
// through Asio's resolver, whose awaited answer comes only when getaddrinfo returns: with a DNS
// server that did not answer, a connection, and with it the call or the slot-map read, waited
// for glibc's whole retry time, past its deadline.
TEST(NodeConnection, AResolverSlowerThanTheDeadlineIsGivenUpAtTheDeadline) {
  SlowResolver resolver{milliseconds(1500)};
  RedisClusterOptions options;
  options.seeds = {HostPort{"redis-0.example", 6379}};
  options.connect_timeout = milliseconds(100);
  options.refresh_interval = milliseconds(0);
  options.resolve = resolver.Function();
  const auto start = Clock::now();
  auto client = RedisClusterClient::Open(options);
  const auto waited = Clock::now() - start;
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("redis-0.example"), std::string::npos)
      << client.status().ToString();
  // Back while the resolver still runs (it sleeps 1.5 s; an Open that had waited for it would
  // find `finished` at 1).
  EXPECT_GE(*resolver.started, 1);
  EXPECT_EQ(*resolver.finished, 0)
      << "returned after " << std::chrono::duration_cast<milliseconds>(waited).count() << " ms";
  // The client and its connections are gone before the late answers come; the lookups' threads
  // free them (an ASan run would report it otherwise) and touch no connection nor io_context.
  while (*resolver.finished < *resolver.started) std::this_thread::sleep_for(milliseconds(10));
}

}  // namespace
}  // namespace kvtier::tiers::remote
