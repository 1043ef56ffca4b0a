#include "tiers/remote/cluster_node.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace kvtier::tiers::remote {
namespace {

using asio::redirect_error;
using asio::use_awaitable;
using boost::system::error_code;
using ConnectionPtr = std::shared_ptr<NodeConnection>;

long long MillisUntil(Deadline when) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(when - Deadline::clock::now())
      .count();
}

}  // namespace

ClusterNode::ClusterNode(asio::io_context& io, HostPort address, const NodeOptions& options,
                         RemoteCounters& counters)
    : io_(io),
      address_(std::move(address)),
      options_(options),
      counters_(counters),
      breaker_(options.breaker) {}

ClusterNode::~ClusterNode() {
  // A node dropped with its breaker open (a master lost and replaced) is never probed again: the
  // gauge of open breakers would otherwise count it for as long as the client runs.
  if (breaker_.open()) Add(counters_.open_breakers, static_cast<uint64_t>(-1));
}

void ClusterNode::Shutdown() {
  stopping_ = true;
  for (const ConnectionPtr& conn : conns_) conn->Close();
  for (Waiter* waiter : waiters_) waiter->timer.cancel();
}

void ClusterNode::Retire() {
  retired_ = true;
  const std::vector<ConnectionPtr> idle = std::move(idle_);
  idle_.clear();
  for (const ConnectionPtr& conn : idle) Forget(conn);
}

Awaitable<Result<std::vector<resp::Reply>>> ClusterNode::Execute(const CommandBatch& batch,
                                                                 Deadline deadline) {
  if (stopping_) co_return ShuttingDown("remote store client is shutting down");
  if (!breaker_.Allow(Deadline::clock::now())) {
    ++failed_calls_in_episode_;
    co_return Busy(address_.ToString() + " is skipped after " +
                   std::to_string(breaker_.consecutive_failures()) +
                   " failed calls in a row; next try in " +
                   std::to_string(std::max(0LL, MillisUntil(breaker_.retry_at()))) + " ms");
  }
  // A call that gave the node less than this and timed out says little of it: a lookup's 20 ms
  // (remote.lookup_timeout) pass during a fork for a snapshot or a burst of writes on a node that
  // answers the mover's 1 s calls. Counted, such timeouts opened the breaker, which then refused
  // the mover's publishes (their victims dropped unpublished) and fetches, and its probes, mostly
  // lookups, kept failing while the node stayed above 20 ms.
  const bool short_call = deadline - Deadline::clock::now() < options_.shortest_judged_timeout;
  const auto judge = [&](const Status& status) {
    if (short_call && status.code() == StatusCode::kTimeout) {
      breaker_.RecordNoVerdict();
    } else {
      RecordOutcome(status);
    }
  };
  bool queued_too_long = false;
  Result<ConnectionPtr> conn = co_await Acquire(deadline, queued_too_long);
  if (!conn.ok()) {
    // Waiting behind this client's own calls (a lookup's 20 ms behind a mover's large SETs) says
    // nothing of the node: counted as its failure, it would open the breaker on a node that
    // answers every call, and the mover's publishes would then be refused.
    if (queued_too_long) {
      breaker_.RecordNoVerdict();
    } else {
      judge(conn.status());
    }
    co_return conn.status();
  }
  Result<std::vector<resp::Reply>> replies = co_await (*conn)->Exchange(batch, deadline);
  Release(std::move(*conn));
  judge(replies.status());
  co_return replies;
}

Awaitable<Result<ConnectionPtr>> ClusterNode::Acquire(Deadline deadline, bool& queued_too_long) {
  while (true) {
    if (stopping_) co_return ShuttingDown("remote store client is shutting down");
    if (!idle_.empty()) {
      ConnectionPtr conn = std::move(idle_.back());
      idle_.pop_back();
      if (conn->StillOpenWhileIdle()) co_return conn;
      Forget(conn);
      continue;
    }
    if (conns_.size() < options_.max_connections) {
      Result<ConnectionPtr> opened = co_await Connect(deadline);
      co_return opened;
    }
    Waiter waiter{asio::steady_timer(io_, deadline), nullptr, false};
    waiters_.push_back(&waiter);
    error_code ec;
    co_await waiter.timer.async_wait(redirect_error(use_awaitable, ec));
    std::erase(waiters_, &waiter);
    if (stopping_) {
      // Shutdown closed every connection, the one handed over too (it may have been handed just
      // before): an exchange on it would fail as the node's fault.
      if (waiter.handed) Forget(waiter.handed);
      co_return ShuttingDown("remote store client is shutting down");
    }
    // A connection handed over as the deadline passed goes back unused: the exchange would time
    // out at once and close a healthy connection.
    if (waiter.handed && Deadline::clock::now() < deadline) co_return std::move(waiter.handed);
    if (waiter.handed) Release(std::move(waiter.handed));
    if (Deadline::clock::now() >= deadline) {
      // The free slot it was woken for goes to the next waiter, who would sleep past it.
      if (waiter.woken) WakeOne();
      queued_too_long = true;
      co_return Timeout("all " + std::to_string(options_.max_connections) + " connections to " +
                        address_.ToString() + " stayed busy until the deadline");
    }
    // Woken without a connection: one was dropped, so there is room to open another.
  }
}

Awaitable<Result<ConnectionPtr>> ClusterNode::Connect(Deadline deadline) {
  auto conn = std::make_shared<NodeConnection>(io_, address_, options_.connection, counters_);
  conns_.push_back(conn);
  const Deadline connect_by = std::min(deadline, Deadline::clock::now() + options_.connect_timeout);
  const Status opened = co_await conn->Open(connect_by);
  if (!opened.ok()) {
    Forget(conn);
    co_return opened;
  }
  if (stopping_) {
    // Shutdown ran while this connection was being made; it must not outlive the client.
    conn->Close();
    Forget(conn);
    co_return ShuttingDown("remote store client is shutting down");
  }
  co_return conn;
}

void ClusterNode::Release(ConnectionPtr conn) {
  if (!conn->usable() || stopping_) {
    Forget(conn);
    return;
  }
  for (Waiter* waiter : waiters_) {
    if (waiter->served()) continue;
    waiter->handed = std::move(conn);
    waiter->timer.cancel();
    return;
  }
  if (retired_) {
    Forget(conn);
    return;
  }
  idle_.push_back(std::move(conn));
}

void ClusterNode::Forget(const ConnectionPtr& conn) {
  conn->Close();
  std::erase(conns_, conn);
  std::erase(idle_, conn);
  WakeOne();
}

void ClusterNode::WakeOne() {
  for (Waiter* waiter : waiters_) {
    if (waiter->served()) continue;
    waiter->woken = true;
    waiter->timer.cancel();
    return;
  }
}

void ClusterNode::RecordOutcome(const Status& status) {
  if (status.ok()) {
    if (breaker_.RecordSuccess()) {
      Add(counters_.open_breakers, static_cast<uint64_t>(-1));
      spdlog::info("remote: {} answers again; {} calls failed or were refused meanwhile",
                   address_.ToString(), failed_calls_in_episode_);
    }
    failed_calls_in_episode_ = 0;
    return;
  }
  if (status.code() == StatusCode::kShuttingDown) {
    breaker_.RecordNoVerdict();  // not the node's fault, but a probe must still be resolved
    return;
  }
  ++failed_calls_in_episode_;
  if (breaker_.RecordFailure(Deadline::clock::now())) {
    Add(counters_.breaker_openings);
    Add(counters_.open_breakers);
    spdlog::warn("remote: {} failed {} calls in a row ({}); skipping it for {} ms, then probing",
                 address_.ToString(), breaker_.consecutive_failures(), status.ToString(),
                 breaker_.backoff().count());
  }
}

}  // namespace kvtier::tiers::remote
