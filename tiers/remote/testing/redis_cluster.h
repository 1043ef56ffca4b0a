// RedisCluster: a real Redis Cluster of local redis-server processes for tests: N masters with R
// replicas each, created with `redis-cli --cluster create`, ready (cluster_state:ok on every node)
// when Start returns. Helpers move slots, fail nodes over and read a node's view, all through
// redis-cli, so the cluster is driven the way an operator drives one.
//
// Not synchronised: one test thread drives it. The destructor kills every server.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "tiers/remote/redis_endpoint.h"
#include "tiers/remote/testing/redis_process.h"
#include "tiers/remote/testing/test_tls.h"

namespace kvtier::tiers::remote::testing {

class RedisCluster {
 public:
  struct Options {
    int masters = 3;
    int replicas_per_master = 1;
    // How long a silent node is considered alive: small for the failover test, large where a
    // stopped node must not be failed over.
    std::chrono::milliseconds node_timeout{2000};
    // Set: every node also serves TLS (its tls_port(); the cluster bus and replication are TLS
    // too) with these certificates, beside the plain port the helpers' redis-cli uses.
    const TestCertificates* tls = nullptr;
  };

  static Result<std::unique_ptr<RedisCluster>> Start(Options options);

  // Every node, in the order given to --cluster create: the masters first, then the replicas.
  const std::vector<std::unique_ptr<RedisProcess>>& nodes() const { return nodes_; }
  RedisProcess& node(size_t i) { return *nodes_[i]; }
  std::vector<HostPort> Seeds() const;
  // The nodes' TLS ports (Options::tls).
  std::vector<HostPort> TlsSeeds() const;

  // redis-cli against node `i`.
  Result<std::string> Cli(size_t i, const std::vector<std::string>& args) const;
  // The node's cluster id (CLUSTER MYID).
  Result<std::string> NodeId(size_t i) const;
  // Index of the node that serves `slot` as master in node `asked`'s view; -1 if unknown.
  int MasterOfSlot(int slot, size_t asked = 0) const;
  // Index of a replica of master `master` (by CLUSTER REPLICAS); -1 if none.
  int ReplicaOf(size_t master) const;

  // Waits until every running, non-stopped node in `among` (all when empty) reports
  // cluster_state:ok and agrees that `slot`'s master is `master` (when slot >= 0).
  bool WaitConverged(std::chrono::milliseconds timeout, int slot = -1, int master = -1,
                     std::vector<size_t> among = {}) const;
  // Waits until every replica's replication offset equals its master's: all writes so far copied.
  bool WaitReplicated(std::chrono::milliseconds timeout) const;

  // Moves `slot` from its master to node `to` for good: SETSLOT IMPORTING/MIGRATING, MIGRATE of
  // every key, then SETSLOT NODE on both. Returns the old master's index.
  Result<int> MoveSlot(int slot, size_t to);
  // Starts a migration of `slot` to `to` and moves only `keys` (keys of that slot): the state in
  // which the old master answers ASK for them. Returns the old master's index.
  Result<int> BeginMigration(int slot, size_t to, const std::vector<std::string>& keys);

 private:
  explicit RedisCluster(Options options) : options_(options) {}
  Status Create();
  Status MigrateKeys(size_t from, size_t to, const std::vector<std::string>& keys);

  Options options_;
  TempDir dir_;
  std::vector<std::unique_ptr<RedisProcess>> nodes_;
};

}  // namespace kvtier::tiers::remote::testing
