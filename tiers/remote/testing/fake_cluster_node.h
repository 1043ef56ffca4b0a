// FakeClusterNode: a stand-in for one node of a Redis Cluster on a loopback port, for tests of how
// the client reads and installs the slot map, where the order of events must be the test's and
// not a real cluster's. It answers INFO (cluster_enabled:1), READONLY and ASKING as a node does,
// CLUSTER SHARDS with the map the test set, and any other command with the reply the test set
// for it (an error otherwise).
//
// A test can hold the next CLUSTER SHARDS: that query gets no answer until the test gives one,
// and every other CLUSTER SHARDS meanwhile has its connection closed (a node gone away), so that
// a slot-map read started earlier comes back after one started later.
//
// Thread safety: every method may be called from any thread. The destructor closes every
// connection and joins the serving thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "tiers/remote/redis_endpoint.h"

namespace kvtier::tiers::remote::testing {

class FakeClusterNode {
 public:
  // Listens on a free loopback port; CLUSTER SHARDS answers that this node serves every slot.
  static Result<std::unique_ptr<FakeClusterNode>> Start();
  ~FakeClusterNode();
  FakeClusterNode(const FakeClusterNode&) = delete;
  FakeClusterNode& operator=(const FakeClusterNode&) = delete;

  HostPort address() const { return {"127.0.0.1", port_}; }

  // A CLUSTER SHARDS reply (RESP) in which `master` serves every slot, without replicas.
  static std::string ShardsOwnedBy(const HostPort& master);
  // The CLUSTER SHARDS reply from now on.
  void SetShards(std::string reply);
  // The reply (RESP) to every later command named `name` (upper case: "GET").
  void SetReply(const std::string& name, std::string reply);

  // Holds the next CLUSTER SHARDS unanswered; until AnswerHeld, the others are refused.
  void HoldNextShards();
  // Whether a CLUSTER SHARDS arrived and is held, within `timeout`.
  bool WaitForHeld(std::chrono::milliseconds timeout);
  // Answers the held CLUSTER SHARDS with `reply` (RESP); later ones are answered again.
  void AnswerHeld(std::string_view reply);

  // Connections open from the client now (the held one included).
  size_t open_connections();

 private:
  struct Connection;

  FakeClusterNode(int listen_fd, uint16_t port);
  void Serve();
  // Reads what `conn` sent and answers its complete commands; false when it is to be closed.
  bool Answer(Connection& conn);

  const int listen_fd_;
  const uint16_t port_;
  std::mutex mu_;
  std::condition_variable held_cv_;
  // Each guarded by mu_.
  std::string shards_;
  std::map<std::string, std::string> replies_;
  std::vector<std::unique_ptr<Connection>> conns_;
  bool hold_next_ = false;
  int held_fd_ = -1;
  bool stopping_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace kvtier::tiers::remote::testing
