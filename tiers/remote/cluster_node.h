// ClusterNode: what the client knows of one Redis node: a small pool of connections to it and its
// circuit breaker.
//
// Execute() runs one pipelined batch on an idle connection, opening one when fewer than
// `max_connections` exist, or waiting for one to come back otherwise (until the deadline). A
// connection that failed is dropped; the next call reconnects. The breaker (circuit_breaker.h)
// counts failed calls in a row: once open, calls answer kBusy at once instead of waiting on the
// node, until its backoff has passed and a probe call succeeds. A breaker that opens is counted
// and logged once (the start of an episode); its closing is logged with the node's recovery.
//
// Lives on the client's I/O thread: every method runs there. Held by shared_ptr: by the client's
// table of nodes while the slot map names the node, and by each call out on it. When a new map no
// longer names it (it left the cluster, or a failover replaced it), the client drops it from the
// table and Retire()s it: its calls in flight finish on their connections, and the node and its
// sockets go with the last of them instead of staying open for as long as the client runs.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "common/resp/reply.h"
#include "common/status.h"
#include "tiers/remote/asio.h"
#include "tiers/remote/circuit_breaker.h"
#include "tiers/remote/command_batch.h"
#include "tiers/remote/node_connection.h"
#include "tiers/remote/redis_endpoint.h"
#include "tiers/remote/remote_stats.h"

namespace kvtier::tiers::remote {

struct NodeOptions {
  ConnectionOptions connection;
  size_t max_connections = 4;
  // Bounds a connection attempt below the call's own deadline, so that a node that does not accept
  // fails fast enough for its breaker to matter.
  std::chrono::milliseconds connect_timeout{1000};
  CircuitBreaker::Options breaker;
  // RedisClusterOptions::shortest_judged_timeout.
  std::chrono::milliseconds shortest_judged_timeout{100};
};

class ClusterNode {
 public:
  // `options` and `counters` must outlive the node.
  ClusterNode(asio::io_context& io, HostPort address, const NodeOptions& options,
              RemoteCounters& counters);
  ~ClusterNode();
  ClusterNode(const ClusterNode&) = delete;
  ClusterNode& operator=(const ClusterNode&) = delete;

  // Runs `batch` on one connection by `deadline`: the replies, one per command. Errors: kBusy (the
  // breaker is open: the node failed repeatedly and is skipped for now), kTimeout, kDeviceError,
  // kPermissionDenied (AUTH refused), kShuttingDown. Each counts against the breaker except
  // kBusy, kShuttingDown, a wait for this client's own busy connections, and a kTimeout of a call
  // whose deadline was under options.shortest_judged_timeout away (a lookup's: it says too little
  // of the node). `batch`
  // must stay valid until the returned awaitable completes.
  Awaitable<Result<std::vector<resp::Reply>>> Execute(const CommandBatch& batch, Deadline deadline);

  // Closes every connection and wakes every waiter: pending calls end (kShuttingDown or an error),
  // and later ones answer kShuttingDown.
  void Shutdown();
  // The slot map no longer names the node: closes its idle connections now, and each busy one as
  // its call ends (handed to a caller waiting for one first), without cutting any call.
  void Retire();

  const HostPort& address() const { return address_; }
  bool breaker_open() const { return breaker_.open(); }
  // Whether a call now would be refused by the breaker (CircuitBreaker::Refuses).
  bool skipped_now() const { return breaker_.Refuses(CircuitBreaker::Clock::now()); }

 private:
  // A caller waiting for a connection. Lives in the waiting coroutine's frame.
  struct Waiter {
    asio::steady_timer timer;
    std::shared_ptr<NodeConnection> handed;  // set by Release; the waiter owns it from then on
    // Set by WakeOne: a slot to open a connection is the waiter's. Until it runs, it is still in
    // waiters_; a second wake-up or a released connection goes to the next one instead.
    bool woken = false;
    bool served() const { return handed != nullptr || woken; }
  };

  // A connection: an idle one, a new one while below max_connections, or the next one released
  // before `deadline`. `queued_too_long`: the deadline passed while waiting for one of this
  // client's busy connections (not a failure of the node).
  Awaitable<Result<std::shared_ptr<NodeConnection>>> Acquire(Deadline deadline,
                                                             bool& queued_too_long);
  Awaitable<Result<std::shared_ptr<NodeConnection>>> Connect(Deadline deadline);
  // Gives a connection back: to the first waiter, to the idle list, or dropped when unusable.
  void Release(std::shared_ptr<NodeConnection> conn);
  void Forget(const std::shared_ptr<NodeConnection>& conn);
  // Wakes the first waiter without a connection: a slot to open one is free.
  void WakeOne();
  void RecordOutcome(const Status& status);

  asio::io_context& io_;
  HostPort address_;
  const NodeOptions& options_;
  RemoteCounters& counters_;
  CircuitBreaker breaker_;
  std::vector<std::shared_ptr<NodeConnection>> conns_;  // every open or opening connection
  std::vector<std::shared_ptr<NodeConnection>> idle_;   // the usable ones nobody holds
  std::deque<Waiter*> waiters_;
  int failed_calls_in_episode_ = 0;  // calls failed or refused since the last success
  bool stopping_ = false;
  bool retired_ = false;  // no connection goes back to idle_
};

}  // namespace kvtier::tiers::remote
