// RedisClusterClient: the RemoteStore of a Redis Cluster, a Valkey Cluster or a single Redis or
// Valkey server, on the project's RESP codec and Boost.Asio.
//
// Open() asks the seeds, in order, whether they run in cluster mode (INFO cluster) and, if so, for
// the slot map (CLUSTER SHARDS, or CLUSTER SLOTS on servers older than 7); a single server serves
// every slot itself. A batch is split by the master of each key's slot and sent as one pipelined
// round per node, all nodes in parallel. A key answered MOVED goes again to the node named (the
// slot map is corrected at once and re-read soon after); one answered ASK goes to the node named,
// preceded by ASKING, without changing the map, once: if that node fails, so does the key (the map
// is re-read; no replica holds the key). Redirections go on in further rounds until every
// key is answered, `max_redirects` is reached, or the deadline passes.
//
// Failure handling: every call has a deadline that bounds all its rounds; a node that fails calls
// in a row is skipped by its circuit breaker (cluster_node.h) and probed again after a backoff; a
// lost connection, a timeout or an unserved slot also schedules a re-read of the slot map (at most
// every `min_refresh_interval`, and twice as far apart, up to a second, after each read that
// found no change or no node: a master lost for good must not cost a new connection to the
// cluster ten times a second from every node), which is how a failover is followed: the promoted
// replica appears in the map once the cluster has elected it. Until then, a GET whose master
// refused the connection or is skipped by its breaker goes once to a replica of that master, within
// the same deadline (every cluster connection sends READONLY, so replicas answer reads): a block a
// lookup has just seen stays readable while its master is down. With lookups_on_replicas, lookups
// (EXISTS) go to a replica first, so that a block they find is one that survives its master's
// failover, and to the master when that replica does not answer; an EXISTS not sent to a replica
// first is read from one as a GET is. A key whose node failed while a refresh moved its slot to
// another node (the map changed during the round) goes to that node, within the same deadline
// (not a DEL, which the dead node may have run). Nothing else is retried: a failure costs a hit,
// and the caller decides.
//
// Threads: the client runs one I/O thread ("kvtier-remote") of its own, which owns every
// connection, the slot map and the nodes; Start* calls from any thread post to it and their
// callbacks run on it. Counters are atomics that any thread may read. The destructor ends every
// pending call (their callbacks run, with kShuttingDown or an error) and joins the thread.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/host_lookup.h"
#include "common/status.h"
#include "tiers/remote/asio.h"
#include "tiers/remote/cluster_node.h"
#include "tiers/remote/cluster_slots.h"
#include "tiers/remote/redis_endpoint.h"
#include "tiers/remote/remote_stats.h"
#include "tiers/remote/remote_store.h"
#include "tiers/remote/tls_context.h"

namespace kvtier::tiers::remote {

struct RedisClusterOptions {
  std::vector<HostPort> seeds;  // at least one; any node of the cluster will do
  std::string user;             // empty: the default user
  std::string password;         // empty: no AUTH
  // Each connection attempt and each slot-map query, below the call's own timeout.
  std::chrono::milliseconds connect_timeout{1000};
  // Resolves the host names of seeds and nodes (ConnectionOptions::resolve); tests stand in a slow
  // resolver.
  AddrInfoFunction resolve = ::getaddrinfo;
  size_t connections_per_node = 4;
  CircuitBreaker::Options breaker;
  // A call that gave a node less time than this and timed out is not held against it (its
  // breaker): a lookup's few milliseconds pass during a fork for a snapshot on a node that
  // answers longer calls. Set it between the short calls' timeout and the long ones'.
  std::chrono::milliseconds shortest_judged_timeout{100};
  int max_redirects = 5;  // per key and call
  std::chrono::milliseconds min_refresh_interval{100};
  // The slot map is also read this often while every call succeeds (0: only after failures), so
  // that replicas that joined later are known before their master fails, for replica reads.
  std::chrono::milliseconds refresh_interval{30'000};
  size_t max_value_bytes = size_t{512} << 20;  // a longer reply is a protocol error
  std::string thread_name = "kvtier-remote";
  // true: Open succeeds when no seed answers (a refused password or bad options still fail), so
  // that a node starts on its local tiers while the store is down. Until a seed answers, every
  // call fails at once with kDeviceError, and the client asks the seeds again in the background,
  // backing off as the breaker does (breaker.initial_backoff doubling to breaker.max_backoff).
  bool open_unreachable = false;
  // true: a lookup (EXISTS) asks a replica of the key's master first, where the map knows one
  // that its breaker does not skip, within half of the call's time, and the master if that
  // replica does not answer (an error, a refused or lost connection, a timeout). A block a
  // replica holds survives its master's failover (when the master has one replica, that replica
  // is the one promoted), so what a lookup found there stays fetchable through a master's crash;
  // replication is asynchronous, and a block written a moment before may not be there yet: a
  // miss, and a replica that lags under a burst of writes misses every block it has not received
  // yet. It also takes the lookups off the masters. Off by default: hits first.
  bool lookups_on_replicas = false;
  // rediss://: every connection is TLS (tls_context.h).
  TlsOptions tls;
};

class RedisClusterClient final : public RemoteStore {
 public:
  // Starts the I/O thread and reads the topology from the first seed that answers, within
  // connect_timeout per seed. Errors: kInvalidArgument (options: no seed, a zero timeout or pool),
  // kPermissionDenied (a seed refused the credentials: the node's words, never the password),
  // kInvalidArgument also for TLS files that cannot be loaded, kDeviceError for a failed TLS
  // handshake (a certificate that does not verify: OpenSSL's reason),
  // kDeviceError (no seed answered; each seed's error is named), unless open_unreachable.
  static Result<std::unique_ptr<RedisClusterClient>> Open(RedisClusterOptions options);

  ~RedisClusterClient() override;
  RedisClusterClient(const RedisClusterClient&) = delete;
  RedisClusterClient& operator=(const RedisClusterClient&) = delete;

  void StartGet(std::vector<std::string> keys, std::chrono::milliseconds timeout,
                GetCallback done) override;
  void StartSet(std::vector<RemoteWrite> writes, std::chrono::milliseconds ttl,
                std::chrono::milliseconds timeout, StatusCallback done) override;
  void StartExists(std::vector<std::string> keys, std::chrono::milliseconds timeout,
                   StatusCallback done) override;
  void StartDelete(std::vector<std::string> keys, std::chrono::milliseconds timeout,
                   StatusCallback done) override;

  void VisitStats(
      const std::function<void(std::string_view name, double value)>& visit) const override {
    VisitRemoteStats(counters_.Snapshot(), visit);
  }

  // Whether a seed has answered: always after a successful Open without open_unreachable.
  bool reached() const { return mode_known_.load(std::memory_order_acquire); }
  // True when the seeds run Redis Cluster, false for a single server (and before reached()).
  // Fixed once reached.
  bool cluster_mode() const { return cluster_mode_.load(std::memory_order_acquire); }
  RemoteStats stats() const { return counters_.Snapshot(); }
  // The masters of the current slot map ("host:port"), sorted. Blocks until the I/O thread answers.
  std::vector<std::string> Masters();
  // Re-reads the slot map now (not rate-limited) and waits for it. The map in use afterwards is
  // the one read, or a newer one that a read started later installed meanwhile. Errors as Open.
  Status RefreshTopology();

 protected:
  bool OnCallbackThread() const override;

 private:
  enum class OpKind : uint8_t { kGet, kSet, kExists, kDelete };
  struct Op;
  struct Route;

  RedisClusterClient(RedisClusterOptions options, std::shared_ptr<asio::ssl::context> tls);

  void Start(std::shared_ptr<Op> op);
  // cluster_ops.cc: one call, round after round.
  Awaitable<void> RunOp(std::shared_ptr<Op> op);
  Awaitable<void> RunNodeRound(std::shared_ptr<Op> op, HostPort node, std::vector<size_t> keys,
                               std::shared_ptr<class WaitGroup> done);
  // Keys of `keys` that `failed` could not answer and whose slot the map now gives to another
  // node go there in the next round; returns the others.
  std::vector<size_t> ToNewOwners(Op& op, std::vector<size_t> keys, const HostPort& failed);
  // After `failed` could not answer `keys` (code): reads of them go next to a replica of their
  // master, where the map knows one.
  void ReadFromReplicas(Op& op, const std::vector<size_t>& keys, const HostPort& failed,
                        StatusCode code);
  // A replica of `slot`'s master that its breaker does not skip now, for a lookup
  // (lookups_on_replicas).
  std::optional<HostPort> LookupReplica(int slot, const HostPort& master);
  // Keys of `keys` that a replica was asked first and could not answer go to their master in the
  // next round; returns the others.
  std::vector<size_t> BackToMaster(Op& op, std::vector<size_t> keys);
  void AddCommand(const Op& op, size_t i, CommandBatch& batch) const;
  void Interpret(Op& op, size_t i, resp::Reply reply, const HostPort& node);
  bool FollowRedirect(Op& op, size_t i, const std::string& error, const HostPort& node);
  void FailKeys(Op& op, const std::vector<size_t>& keys, const Status& status);
  // The node at `address`, made on first use (a redirection or a replica may name a node the map
  // does not name yet).
  const std::shared_ptr<ClusterNode>& NodeAt(const HostPort& address);

  // cluster_topology.cc: the slot map.
  Awaitable<Status> Refresh();
  Awaitable<Result<SlotMap>> QueryTopology(const HostPort& candidate);
  Awaitable<Result<SlotMap>> AskTopology(NodeConnection& conn, Deadline deadline);
  std::vector<HostPort> RefreshCandidates();
  // Schedules a re-read of the slot map, rate-limited; a no-op for a single server.
  void RequestRefresh();
  Awaitable<void> RefreshLoop();
  // Asks for a refresh every `refresh_interval`, until the client stops.
  Awaitable<void> PeriodicRefresh();
  // Asks the seeds again, with backoff, until one answers (open_unreachable).
  Awaitable<void> ReachLoop();
  void InstallMap(SlotMap map);
  void RememberMovedSlot(int slot, const HostPort& owner);
  // Applies to `map`, read by read number `read`, the moves it may not know of (moved_slots_).
  void ApplyMovedSlots(uint64_t read, SlotMap& map);
  // Drops from nodes_ every node that slot_map_ no longer names, closing its connections as its
  // calls end (ClusterNode::Retire).
  void DropNodesOffTheMap();
  void ShutdownOnIoThread();

  const RedisClusterOptions options_;
  const NodeOptions node_options_;
  // The same for the nodes of a cluster, whose connections send READONLY (replica reads).
  const NodeOptions cluster_node_options_;
  RemoteCounters counters_;
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::atomic<bool> stopping_{false};
  // Written on the I/O thread by the first topology query that a seed answers (the one Open waits
  // for, or ReachLoop's); read-only after. Atomic for cluster_mode() and reached().
  std::atomic<bool> cluster_mode_{false};
  std::atomic<bool> mode_known_{false};

  // Touched only on the I/O thread.
  SlotMap slot_map_;
  // The nodes the map names, and any that a redirection or a call planned on an earlier map has
  // reached since the map was read (dropped at the next read unless the map names them).
  std::map<HostPort, std::shared_ptr<ClusterNode>> nodes_;
  // Nodes dropped from nodes_ while calls were out on them: shut down with the client.
  std::vector<std::weak_ptr<ClusterNode>> retired_nodes_;
  std::vector<std::shared_ptr<NodeConnection>> topology_conns_;  // slot-map queries under way
  asio::steady_timer refresh_timer_{io_};
  asio::steady_timer reach_timer_{io_};
  asio::steady_timer periodic_timer_{io_};
  Deadline last_refresh_{};
  // Between two slot-map reads asked for by failures: min_refresh_interval, doubled by each read
  // that changed nothing, up to kMaxRefreshSpacing; back to the minimum when the map changes.
  std::chrono::milliseconds refresh_spacing_{0};
  bool refreshing_ = false;
  bool refresh_again_ = false;
  // Slot-map reads are numbered as they start, and a read installs its map only when no read
  // started after it has installed one: reads may be out at once (RefreshTopology's beside
  // RefreshLoop's or ReachLoop's), and the one asked first may be answered last, by a node that
  // has not heard of a failover yet. Numbering, rather than one read at a time, keeps each read
  // bounded by its own candidates and deadline instead of queueing behind a slow one.
  uint64_t map_reads_started_ = 0;
  uint64_t installed_map_read_ = 0;  // the number of the read whose map is installed
  // The slots MOVED answers moved since the reads then out started, each with the number of the
  // last read started before it: a map those reads installs gets the move applied again (the
  // node that answered may not have heard of it), until a read started after it installs.
  struct MovedSlot {
    int slot = 0;
    HostPort owner;
    uint64_t after_read = 0;
  };
  std::vector<MovedSlot> moved_slots_;
  bool refresh_failing_ = false;    // the last refresh found no node: log once per episode
  bool use_cluster_slots_ = false;  // CLUSTER SHARDS was refused: an older server

  std::thread thread_;  // last: started once everything above exists
};

}  // namespace kvtier::tiers::remote
