// RedisClusterClient's slot map against fake cluster nodes (testing/fake_cluster_node.h), where
// the test, not a real cluster, decides when each slot-map read is answered.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tiers/remote/redis_cluster_client.h"
#include "tiers/remote/testing/fake_cluster_node.h"

namespace kvtier::tiers::remote {
namespace {

using std::chrono::milliseconds;
using testing::FakeClusterNode;

std::unique_ptr<FakeClusterNode> StartNode() {
  auto node = FakeClusterNode::Start();
  if (!node.ok()) {
    ADD_FAILURE() << node.status().ToString();
    return nullptr;
  }
  return std::move(node).value();
}

// Regression: two slot-map reads out at once (RefreshTopology beside a refresh a call asked for)
// installed their maps in the order they were answered, not the order they were read, so a read
// answered late by a node with an old view replaced the map a later read had installed.
TEST(ClusterTopology, AnEarlierMapReadAnsweredLastDoesNotReplaceALaterOnesMap) {
  auto old_view = StartNode();
  auto new_view = StartNode();
  ASSERT_TRUE(old_view && new_view);
  // Each node answers that it serves every slot: the old view, and the view after a failover.
  RedisClusterOptions options;
  options.seeds = {old_view->address(), new_view->address()};
  options.connect_timeout = milliseconds(10'000);  // the held read must not time out
  options.refresh_interval = milliseconds(0);
  auto opened = RedisClusterClient::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  RedisClusterClient& client = **opened;
  ASSERT_EQ(client.Masters(), std::vector<std::string>{old_view->address().ToString()});

  // The earlier read goes to the map's master, which holds it.
  old_view->HoldNextShards();
  Status earlier = Internal("not read");
  std::thread earlier_read([&] { earlier = client.RefreshTopology(); });
  ASSERT_TRUE(old_view->WaitForHeld(milliseconds(10'000)));
  // The later one is refused there and read from the other seed: the new view is installed.
  ASSERT_TRUE(client.RefreshTopology().ok());
  ASSERT_EQ(client.Masters(), std::vector<std::string>{new_view->address().ToString()});

  // Now the earlier read is answered, with the old view.
  old_view->AnswerHeld(FakeClusterNode::ShardsOwnedBy(old_view->address()));
  earlier_read.join();
  EXPECT_TRUE(earlier.ok()) << earlier.ToString();
  EXPECT_EQ(client.Masters(), std::vector<std::string>{new_view->address().ToString()});
}

}  // namespace
}  // namespace kvtier::tiers::remote
