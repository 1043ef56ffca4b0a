// RedisClusterClient's slot map against fake cluster nodes (testing/fake_cluster_node.h), where
// the test, not a real cluster, decides when each slot-map read is answered.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tiers/remote/cluster_slots.h"
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

// A MOVED that comes while a slot-map read is held: both nodes say `old_owner_` serves every
// slot; the read goes to it and is held; then a GET of `key_` meets a MOVED to `new_owner_`.
// The read started before the MOVED is answered after it (AnswerTheHeldRead).
class MovedDuringAMapRead : public ::testing::Test {
 protected:
  void SetUp() override {
    old_owner_ = StartNode();
    new_owner_ = StartNode();
    ASSERT_TRUE(old_owner_ && new_owner_);
    new_owner_->SetShards(FakeClusterNode::ShardsOwnedBy(old_owner_->address()));
    RedisClusterOptions options;
    options.seeds = {old_owner_->address(), new_owner_->address()};
    options.connect_timeout = milliseconds(10'000);  // the held read must not time out
    options.refresh_interval = milliseconds(0);
    // The read the MOVED asks for waits past the test: only the held read answers in it.
    options.min_refresh_interval = milliseconds(600'000);
    auto opened = RedisClusterClient::Open(options);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    client_ = std::move(opened).value();
    ASSERT_EQ(client_->Masters(), std::vector<std::string>{old_owner_->address().ToString()});

    old_owner_->HoldNextShards();
    earlier_read_ = std::thread([this] { earlier_ = client_->RefreshTopology(); });
    ASSERT_TRUE(old_owner_->WaitForHeld(milliseconds(10'000)));
    old_owner_->SetReply("GET", "-MOVED " + std::to_string(KeySlot(key_)) + " " +
                                    new_owner_->address().ToString() + "\r\n");
    new_owner_->SetReply("GET", "$5\r\nvalue\r\n");
    std::vector<Result<std::string>> got = client_->Get({key_}, milliseconds(10'000));
    ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
    ASSERT_EQ(client_->stats().moved_redirects, 1u);
  }
  void TearDown() override {
    if (earlier_read_.joinable()) {
      old_owner_->AnswerHeld(FakeClusterNode::ShardsOwnedBy(old_owner_->address()));
      earlier_read_.join();
    }
  }
  void AnswerTheHeldRead(const HostPort& master_of_every_slot) {
    old_owner_->AnswerHeld(FakeClusterNode::ShardsOwnedBy(master_of_every_slot));
    earlier_read_.join();
    EXPECT_TRUE(earlier_.ok()) << earlier_.ToString();
  }

  const std::string key_ = "moved-key";
  std::unique_ptr<FakeClusterNode> old_owner_, new_owner_;
  std::unique_ptr<RedisClusterClient> client_;
  std::thread earlier_read_;
  Status earlier_ = Internal("not read");
};

// Regression: a MOVED corrects its slot in the map at once, but a slot-map read started before it
// and answered after it, by a node that had not heard of the move, put the old owner back: the
// next call to that slot was redirected again.
TEST_F(MovedDuringAMapRead, TheReadDoesNotUndoTheMove) {
  AnswerTheHeldRead(old_owner_->address());
  std::vector<Result<std::string>> got = client_->Get({key_}, milliseconds(10'000));
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_EQ(client_->stats().moved_redirects, 1u);  // straight to the new owner
}

// And the read's news of the other slots is installed, not dropped: here a failover to a third
// node that it learnt of, with the moved slot still on its new owner.
TEST_F(MovedDuringAMapRead, TheReadsNewsIsInstalledWithTheMove) {
  auto promoted = StartNode();
  ASSERT_TRUE(promoted);
  AnswerTheHeldRead(promoted->address());
  std::vector<std::string> masters = {new_owner_->address().ToString(),
                                      promoted->address().ToString()};
  std::sort(masters.begin(), masters.end());
  EXPECT_EQ(client_->Masters(), masters);
}

}  // namespace
}  // namespace kvtier::tiers::remote
