// RedisClusterClient: the slot map. Read at Open and again whenever a call meets a MOVED, a node
// that cannot be reached or an unserved slot (rate-limited), from the first node that answers.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "tiers/remote/redis_cluster_client.h"

namespace kvtier::tiers::remote {
namespace {

using asio::redirect_error;
using asio::use_awaitable;

// The widest spacing of failure-driven slot-map reads: a failover is still followed within a
// second of the cluster electing the new master.
constexpr std::chrono::milliseconds kMaxRefreshSpacing{1000};

std::string Describe(const std::vector<HostPort>& nodes) {
  std::string out;
  for (const HostPort& n : nodes) out += (out.empty() ? "" : ", ") + n.ToString();
  return out;
}

}  // namespace

std::vector<HostPort> RedisClusterClient::RefreshCandidates() {
  // Masters that answer lately first (any node knows the whole map), then the seeds, then the
  // masters skipped by their breaker, which are the least likely to answer.
  std::vector<HostPort> out;
  std::vector<HostPort> skipped;
  auto add = [&out](const HostPort& n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  for (const HostPort& m : slot_map_.Masters()) {
    const auto it = nodes_.find(m);
    if (it != nodes_.end() && it->second->breaker_open()) {
      skipped.push_back(m);
    } else {
      add(m);
    }
  }
  for (const HostPort& seed : options_.seeds) add(seed);
  for (const HostPort& m : skipped) add(m);
  return out;
}

Awaitable<Status> RedisClusterClient::Refresh() {
  last_refresh_ = Deadline::clock::now();
  std::string errors;
  Status denied;
  for (const HostPort& candidate : RefreshCandidates()) {
    if (stopping_) co_return ShuttingDown("remote store client is shutting down");
    const uint64_t read = ++map_reads_started_;
    Result<SlotMap> map = co_await QueryTopology(candidate);
    if (map.ok()) {
      // Otherwise a read started later has installed a newer map meanwhile: this one is dropped.
      if (read > installed_map_read_) {
        ApplyMovedSlots(read, *map);
        const bool changed = !map->SameRoutesAs(slot_map_);
        refresh_spacing_ = changed ? options_.min_refresh_interval
                                   : std::max(options_.min_refresh_interval,
                                              std::min(refresh_spacing_ * 2, kMaxRefreshSpacing));
        installed_map_read_ = read;
        InstallMap(std::move(map).value());
      }
      Add(counters_.topology_refreshes);
      if (refresh_failing_) spdlog::info("remote: the slot map is readable again");
      refresh_failing_ = false;
      co_return Status::Ok();
    }
    if (map.status().code() == StatusCode::kPermissionDenied && denied.ok()) denied = map.status();
    errors += (errors.empty() ? "" : "; ") + map.status().message();
  }
  Add(counters_.topology_refresh_failures);
  refresh_spacing_ =
      std::max(options_.min_refresh_interval, std::min(refresh_spacing_ * 2, kMaxRefreshSpacing));
  if (!refresh_failing_) spdlog::warn("remote: no node answered for the slot map: {}", errors);
  refresh_failing_ = true;
  // A refused password is the error to report: retrying elsewhere will not fix it.
  if (!denied.ok()) co_return denied;
  co_return DeviceError("no node of the remote store answered: " + errors);
}

Awaitable<Result<SlotMap>> RedisClusterClient::QueryTopology(const HostPort& candidate) {
  auto conn = std::make_shared<NodeConnection>(io_, candidate, node_options_.connection, counters_);
  topology_conns_.push_back(conn);
  const Deadline deadline = Deadline::clock::now() + options_.connect_timeout;
  auto forget = [&] {
    conn->Close();
    std::erase(topology_conns_, conn);
  };
  const Status opened = co_await conn->Open(deadline);
  if (!opened.ok()) {
    forget();
    co_return opened;
  }
  Result<SlotMap> map = co_await AskTopology(*conn, deadline);
  forget();
  co_return map;
}

Awaitable<Result<SlotMap>> RedisClusterClient::AskTopology(NodeConnection& conn,
                                                           Deadline deadline) {
  const HostPort& node = conn.node();
  CommandBatch batch;
  if (mode_known_ && !cluster_mode_) {
    // A single server: whoever answers serves every slot.
    batch.Command({"PING"});
  } else {
    if (!mode_known_) batch.Command({"INFO", "cluster"});
    batch.Command({"CLUSTER", use_cluster_slots_ ? "SLOTS" : "SHARDS"});
  }
  Result<std::vector<resp::Reply>> replies = co_await conn.Exchange(batch, deadline);
  if (!replies.ok()) co_return replies.status();
  for (const resp::Reply& r : *replies) {
    // NOPERM: the ACL user may not read the topology; asking again will not change that.
    if (r.is_error() && (r.str.starts_with("NOAUTH") || r.str.starts_with("WRONGPASS") ||
                         r.str.starts_with("NOPERM"))) {
      co_return PermissionDenied(node.ToString() + " answered: " + r.str);
    }
  }
  if (!mode_known_) {
    const resp::Reply& info = replies->front();
    if (info.is_error()) co_return DeviceError(node.ToString() + " refused INFO: " + info.str);
    cluster_mode_ = InfoSaysClusterEnabled(info.str);
    mode_known_.store(true, std::memory_order_release);
  }
  if (!cluster_mode_) co_return SlotMap::SingleNode(node);
  const resp::Reply& topology = replies->back();
  if (!topology.is_error()) {
    co_return use_cluster_slots_ ? ParseClusterSlots(topology, node)
                                 : ParseClusterShards(topology, node, options_.tls.enabled);
  }
  if (use_cluster_slots_) co_return DeviceError(node.ToString() + " answered: " + topology.str);
  // A server older than Redis 7 has no CLUSTER SHARDS: use CLUSTER SLOTS from now on.
  use_cluster_slots_ = true;
  CommandBatch slots;
  slots.Command({"CLUSTER", "SLOTS"});
  Result<std::vector<resp::Reply>> slot_replies = co_await conn.Exchange(slots, deadline);
  if (!slot_replies.ok()) co_return slot_replies.status();
  const resp::Reply& reply = slot_replies->front();
  if (reply.is_error()) co_return DeviceError(node.ToString() + " answered: " + reply.str);
  co_return ParseClusterSlots(reply, node);
}

void RedisClusterClient::RememberMovedSlot(int slot, const HostPort& owner) {
  const auto same_slot = [&](const MovedSlot& m) { return m.slot == slot; };
  std::erase_if(moved_slots_, same_slot);
  moved_slots_.push_back({slot, owner, map_reads_started_});
}

void RedisClusterClient::ApplyMovedSlots(uint64_t read, SlotMap& map) {
  // A read started after a move knows of it (or of a later one); one started before may not.
  std::erase_if(moved_slots_, [&](const MovedSlot& m) { return m.after_read < read; });
  for (const MovedSlot& m : moved_slots_) map.Assign(m.slot, m.slot, m.owner);
}

void RedisClusterClient::InstallMap(SlotMap map) {
  const std::vector<HostPort> before = slot_map_.Masters();
  const std::vector<HostPort> after = map.Masters();
  slot_map_ = std::move(map);
  counters_.masters.store(after.size(), std::memory_order_relaxed);
  DropNodesOffTheMap();
  if (before == after) return;
  const int unserved = kSlotCount - slot_map_.covered_slots();
  if (unserved == 0) {
    spdlog::info("remote: slot map: {} masters ({})", after.size(), Describe(after));
  } else {
    spdlog::warn("remote: slot map: {} masters ({}); {} slots served by no node", after.size(),
                 Describe(after), unserved);
  }
}

void RedisClusterClient::DropNodesOffTheMap() {
  std::erase_if(retired_nodes_, [](const std::weak_ptr<ClusterNode>& n) { return n.expired(); });
  const std::vector<HostPort> named = slot_map_.Nodes();
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (std::find(named.begin(), named.end(), it->first) != named.end()) {
      ++it;
      continue;
    }
    it->second->Retire();
    // Still alive only while a call is out on it.
    if (it->second.use_count() > 1) retired_nodes_.push_back(it->second);
    it = nodes_.erase(it);
  }
}

void RedisClusterClient::RequestRefresh() {
  // Before a seed has answered, ReachLoop does the asking.
  if (!mode_known_ || !cluster_mode_ || stopping_) return;
  if (refreshing_) {
    refresh_again_ = true;
    return;
  }
  refreshing_ = true;
  asio::co_spawn(io_, RefreshLoop(), [this](std::exception_ptr) { refreshing_ = false; });
}

Awaitable<void> RedisClusterClient::RefreshLoop() {
  do {
    refresh_again_ = false;
    const Deadline earliest =
        last_refresh_ + std::max(options_.min_refresh_interval, refresh_spacing_);
    if (Deadline::clock::now() < earliest) {
      refresh_timer_.expires_at(earliest);
      boost::system::error_code ignored;
      co_await refresh_timer_.async_wait(redirect_error(use_awaitable, ignored));
    }
    if (stopping_) break;
    // Refresh logs its own failures, once per episode.
    const Status refreshed = co_await Refresh();
    (void)refreshed;
  } while (refresh_again_ && !stopping_);
}

Awaitable<void> RedisClusterClient::PeriodicRefresh() {
  while (!stopping_) {
    periodic_timer_.expires_after(options_.refresh_interval);
    boost::system::error_code ignored;
    co_await periodic_timer_.async_wait(redirect_error(use_awaitable, ignored));
    if (stopping_) break;
    RequestRefresh();  // a no-op until a seed answered, and for a single server
  }
}

Awaitable<void> RedisClusterClient::ReachLoop() {
  std::chrono::milliseconds backoff = options_.breaker.initial_backoff;
  while (!stopping_ && !mode_known_) {
    reach_timer_.expires_after(backoff);
    boost::system::error_code ignored;
    co_await reach_timer_.async_wait(redirect_error(use_awaitable, ignored));
    if (stopping_) break;
    const Status refreshed = co_await Refresh();  // logs its failures once per episode
    if (refreshed.ok()) {
      spdlog::info("remote: reached {} ({} masters)",
                   cluster_mode_ ? "a Redis Cluster" : "a single Redis server",
                   counters_.masters.load());
      break;
    }
    if (refreshed.code() == StatusCode::kPermissionDenied) {
      // Asking again will not change the answer; the error is in the log and in every call.
      spdlog::error("remote: {}; the remote tier stays off", refreshed.message());
      break;
    }
    backoff = std::min(backoff * 2, options_.breaker.max_backoff);
  }
}

}  // namespace kvtier::tiers::remote
