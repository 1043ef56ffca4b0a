// RedisClusterClient: one call, as rounds. Each round groups the keys still unanswered by the node
// they go to, sends one pipelined batch per node, all in parallel, and reads the answers; keys
// answered MOVED or ASK go again in the next round.
#include <algorithm>
#include <map>
#include <string_view>
#include <utility>

#include "tiers/remote/cluster_op.h"
#include "tiers/remote/redis_cluster_client.h"
#include "tiers/remote/wait_group.h"

namespace kvtier::tiers::remote {
namespace {

// The error words a node answers with when it cannot serve now but may soon: retry later.
bool IsTransient(std::string_view word) {
  return word == "OOM" || word == "LOADING" || word == "BUSY" || word == "TRYAGAIN" ||
         word == "MASTERDOWN" || word == "CLUSTERDOWN";
}

Status ServerError(const std::string& text, const HostPort& node) {
  const std::string_view word = std::string_view(text).substr(0, text.find(' '));
  const std::string message = node.ToString() + " answered: " + text;
  if (IsTransient(word)) return Busy(message);
  if (word == "NOAUTH" || word == "WRONGPASS" || word == "NOPERM") {
    return PermissionDenied(message);
  }
  return DeviceError(message);
}

Status Unexpected(const resp::Reply& reply, const HostPort& node) {
  return DeviceError(node.ToString() + " answered with an unexpected " +
                     std::string(resp::ReplyTypeName(reply.type)));
}

}  // namespace

Awaitable<void> RedisClusterClient::RunOp(std::shared_ptr<Op> op) {
  std::vector<size_t> pending(op->keys.size());
  for (size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  while (!pending.empty()) {
    if (stopping_) {
      FailKeys(*op, pending, ShuttingDown("remote store client is shutting down"));
      break;
    }
    if (Deadline::clock::now() >= op->deadline) {
      FailKeys(*op, pending, Timeout("remote call: no answer within its timeout"));
      break;
    }
    std::map<HostPort, std::vector<size_t>> rounds;
    for (const size_t i : pending) {
      if (op->routes[i].ask_target) {
        rounds[*op->routes[i].ask_target].push_back(i);
        continue;
      }
      op->routes[i].to_replica = op->routes[i].replica_target.has_value();
      if (op->routes[i].replica_target) {
        rounds[*op->routes[i].replica_target].push_back(i);
        op->routes[i].replica_target.reset();
        continue;
      }
      const int slot = KeySlot(op->keys[i]);
      const HostPort* node = slot_map_.NodeOf(slot);
      if (node == nullptr) {
        FailKeys(*op, {i},
                 mode_known_ ? DeviceError("slot " + std::to_string(slot) + " is served by no node")
                             : DeviceError("the remote store has not answered yet"));
        RequestRefresh();
        continue;
      }
      if (op->kind == OpKind::kExists && options_.lookups_on_replicas &&
          !op->routes[i].tried_replica) {
        if (const std::optional<HostPort> replica = LookupReplica(slot, *node)) {
          op->routes[i].tried_replica = true;
          op->routes[i].at_replica = true;
          Add(counters_.replica_lookups);
          rounds[*replica].push_back(i);
          continue;
        }
      }
      rounds[*node].push_back(i);
    }
    op->redirected.clear();
    auto done = std::make_shared<WaitGroup>(io_, rounds.size());
    for (auto& [node, keys] : rounds) {
      asio::co_spawn(io_, RunNodeRound(op, node, std::move(keys), done),
                     [done](std::exception_ptr) { done->Done(); });
    }
    co_await done->Wait();
    pending = std::move(op->redirected);
  }
}

Awaitable<void> RedisClusterClient::RunNodeRound(std::shared_ptr<Op> op, HostPort node,
                                                 std::vector<size_t> keys,
                                                 std::shared_ptr<WaitGroup> done) {
  CommandBatch batch;
  for (const size_t i : keys) {
    if (op->routes[i].ask_target) batch.Command({"ASKING"});
    AddCommand(*op, i, batch);
  }
  // Lookups sent to a replica first leave half of the call's time to their master, should the
  // replica not answer (hung, or gone without closing its connections).
  Deadline deadline = op->deadline;
  if (std::all_of(keys.begin(), keys.end(), [&](size_t i) { return op->routes[i].at_replica; })) {
    const Deadline now = Deadline::clock::now();
    if (now < deadline) deadline = now + (deadline - now) / 2;
  }
  // Held for the round: a refresh may drop the node from the table while the call is out.
  const std::shared_ptr<ClusterNode> target = NodeAt(node);
  Result<std::vector<resp::Reply>> replies = co_await target->Execute(batch, deadline);
  if (!replies.ok()) {
    keys = BackToMaster(*op, std::move(keys));
    keys = ToNewOwners(*op, std::move(keys), node);
    FailKeys(*op, keys, replies.status());
    // A node that cannot be reached, or that its breaker skips, may have been replaced
    // (failover): read the map again (at most every min_refresh_interval), so that calls go to
    // the promoted replica as soon as the cluster has elected it, not at the breaker's next probe.
    const StatusCode code = replies.status().code();
    if (code == StatusCode::kTimeout || code == StatusCode::kDeviceError ||
        code == StatusCode::kBusy) {
      RequestRefresh();
    }
    ReadFromReplicas(*op, keys, node, code);
    // An ASK holds for one try: a key whose importing node failed is done with this round (see
    // ReadFromReplicas), and must not be sent there again by a later round.
    for (const size_t i : keys) op->routes[i].ask_target.reset();
    co_return;
  }
  size_t next = 0;
  for (const size_t i : keys) {
    // ASKING's own answer (+OK) comes first; the command's answer says whether it worked.
    if (op->routes[i].ask_target) ++next;
    op->routes[i].ask_target.reset();
    resp::Reply& reply = (*replies)[next++];
    // A replica that cannot serve a lookup (LOADING, MASTERDOWN, any other error): its master
    // answers instead. A redirection (MOVED, for a slot it no longer replicates) is followed as
    // from any node.
    if (op->routes[i].at_replica && reply.is_error() && !ParseRedirect(reply.str)) {
      BackToMaster(*op, {i});
      continue;
    }
    op->routes[i].at_replica = false;
    Interpret(*op, i, std::move(reply), node);
  }
}

std::optional<HostPort> RedisClusterClient::LookupReplica(int slot, const HostPort& master) {
  for (const HostPort& replica : slot_map_.ReplicasOf(slot)) {
    if (replica != master && !NodeAt(replica)->skipped_now()) return replica;
  }
  return std::nullopt;
}

std::vector<size_t> RedisClusterClient::BackToMaster(Op& op, std::vector<size_t> keys) {
  std::vector<size_t> others;
  for (const size_t i : keys) {
    if (!op.routes[i].at_replica) {
      others.push_back(i);
      continue;
    }
    // tried_replica stays set: the master's own failure does not send the key back.
    op.routes[i].at_replica = false;
    op.redirected.push_back(i);
    Add(counters_.replica_lookup_fallbacks);
  }
  return others;
}

std::vector<size_t> RedisClusterClient::ToNewOwners(Op& op, std::vector<size_t> keys,
                                                    const HostPort& failed) {
  // A refresh may have installed a new map while the round was out (another call met the same
  // dead master): a key whose slot the map now gives to another node goes there next instead of
  // failing, or of being read from a replica of a master the cluster has replaced. Not a key sent
  // to an ASK target or to a replica this round (its master, which the map may still name, failed
  // it already), not past the redirections a key may follow, and not after the deadline (the
  // node's own error says more than the call's timeout). Not a DEL either: the dead node may have
  // run it before its answer was lost, and the new master would then answer "not found".
  if (op.kind == OpKind::kDelete || Deadline::clock::now() >= op.deadline) return keys;
  std::vector<size_t> others;
  for (const size_t i : keys) {
    Route& route = op.routes[i];
    const HostPort* owner = slot_map_.NodeOf(KeySlot(op.keys[i]));
    if (route.ask_target || route.to_replica || owner == nullptr || *owner == failed ||
        route.redirects >= options_.max_redirects) {
      others.push_back(i);
      continue;
    }
    ++route.redirects;
    op.redirected.push_back(i);
    Add(counters_.new_owner_resends);
  }
  return others;
}

void RedisClusterClient::ReadFromReplicas(Op& op, const std::vector<size_t>& keys,
                                          const HostPort& failed, StatusCode code) {
  // Only reads, and only when the master is down or skipped (a refused connection, a breaker
  // open): a timeout has used the call's time already. Blocks are immutable and checksummed, so a
  // replica's copy is the block or nothing; one that replication has not reached yet is a miss.
  if (op.kind != OpKind::kGet && op.kind != OpKind::kExists) return;
  if (code != StatusCode::kDeviceError && code != StatusCode::kBusy) return;
  for (const size_t i : keys) {
    Route& route = op.routes[i];
    // Not a key whose ASK target (the node importing its slot) failed: the slot's master said by
    // its ASK that the key is no longer there, so its replicas do not hold it either, and the
    // importing node's replicas send reads of a slot their master does not serve yet back to the
    // slot's master. The key fails now with the importing node's error (a miss to the caller); the
    // map is read again, and the next call finds the slot wherever the migration or a failover
    // has put it.
    if (route.tried_replica || route.ask_target) continue;
    for (const HostPort& replica : slot_map_.ReplicasOf(KeySlot(op.keys[i]))) {
      if (replica == failed || NodeAt(replica)->skipped_now()) continue;
      route.tried_replica = true;
      route.replica_target = replica;
      op.redirected.push_back(i);
      Add(counters_.replica_reads);
      break;
    }
  }
}

void RedisClusterClient::AddCommand(const Op& op, size_t i, CommandBatch& batch) const {
  const std::string& key = op.keys[i];
  switch (op.kind) {
    case OpKind::kGet:
      batch.Command({"GET", key});
      return;
    case OpKind::kSet:
      batch.Begin(5);
      batch.Arg("SET");
      batch.Arg(key);
      batch.ArgParts(op.writes[i].value_parts);
      batch.Arg("PX");
      batch.Arg(op.ttl_ms);
      return;
    case OpKind::kExists:
      batch.Command({"EXISTS", key});
      return;
    case OpKind::kDelete:
      batch.Command({"DEL", key});
      return;
  }
}

void RedisClusterClient::Interpret(Op& op, size_t i, resp::Reply reply, const HostPort& node) {
  Result<std::string>& answer = op.answers[i];
  if (reply.is_error()) {
    if (FollowRedirect(op, i, reply.str, node)) return;
    answer = ServerError(reply.str, node);
    Add(counters_.errors_server);
    return;
  }
  const bool integer = reply.type == resp::ReplyType::kInteger;
  switch (op.kind) {
    case OpKind::kGet:
      if (reply.type == resp::ReplyType::kBulkString) {
        Add(counters_.hits);
        answer = std::move(reply.str);
      } else if (reply.is_null()) {
        Add(counters_.misses);
        answer = NotFound("remote: no value for " + op.keys[i]);
      } else {
        answer = Unexpected(reply, node);
      }
      return;
    case OpKind::kSet:
      answer = reply.type == resp::ReplyType::kSimpleString && reply.str == "OK"
                   ? Result<std::string>(std::string())
                   : Result<std::string>(Unexpected(reply, node));
      return;
    case OpKind::kExists:
    case OpKind::kDelete:
      if (!integer) {
        answer = Unexpected(reply, node);
      } else if (reply.integer > 0) {
        answer = std::string();
      } else {
        answer = NotFound("remote: no value for " + op.keys[i]);
      }
      return;
  }
}

bool RedisClusterClient::FollowRedirect(Op& op, size_t i, const std::string& error,
                                        const HostPort& node) {
  std::optional<Redirect> redirect = ParseRedirect(error);
  if (!redirect) return false;
  // "MOVED 3999 :6381": a node whose endpoint the cluster does not know, on the same host.
  if (redirect->target.host.empty()) redirect->target.host = node.host;
  if (++op.routes[i].redirects > options_.max_redirects) {
    op.answers[i] =
        DeviceError("remote: " + op.keys[i] + " still redirected after " +
                    std::to_string(options_.max_redirects) + " redirections (" + error + ")");
    Add(counters_.errors_server);
    return true;
  }
  if (redirect->kind == Redirect::Kind::kMoved) {
    Add(counters_.moved_redirects);
    // The slot moved for good: correct the map now for the next calls, and re-read all of it
    // soon, since a resharding or failover rarely moves one slot alone.
    slot_map_.Assign(redirect->slot, redirect->slot, redirect->target);
    RememberMovedSlot(redirect->slot, redirect->target);
    RequestRefresh();
  } else {
    // A slot being migrated: only this key, only the next try, goes to the importing node.
    Add(counters_.ask_redirects);
    op.routes[i].ask_target = redirect->target;
  }
  op.redirected.push_back(i);
  return true;
}

void RedisClusterClient::FailKeys(Op& op, const std::vector<size_t>& keys, const Status& status) {
  std::atomic<uint64_t>* counter = nullptr;
  switch (status.code()) {
    case StatusCode::kTimeout:
      counter = &counters_.errors_timeout;
      break;
    case StatusCode::kBusy:
      counter = &counters_.errors_breaker;
      break;
    case StatusCode::kDeviceError:
      counter = &counters_.errors_unavailable;
      break;
    default:
      break;
  }
  for (const size_t i : keys) op.answers[i] = status;
  if (counter != nullptr) Add(*counter, keys.size());
}

}  // namespace kvtier::tiers::remote
