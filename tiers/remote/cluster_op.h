// One call of RedisClusterClient in flight: its keys, its deadline, where each key goes next and
// the answers so far. Private to the client's .cc files.
//
// Created by the calling thread, then touched only on the I/O thread until Finish() hands the
// answers to the callback there. Held by shared_ptr: every round of the call holds it.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tiers/remote/redis_cluster_client.h"

namespace kvtier::tiers::remote {

struct RedisClusterClient::Route {
  std::optional<HostPort> ask_target;  // set by ASK: the next round goes there, after ASKING
  // Set when the master failed a read: the next round asks this replica of it instead; once.
  std::optional<HostPort> replica_target;
  bool tried_replica = false;
  bool to_replica = false;  // this round sends the key to replica_target (a read)
  // Set when this round sends a lookup (EXISTS) to a replica first (lookups_on_replicas): if the
  // replica cannot answer, the next round asks the master.
  bool at_replica = false;
  int redirects = 0;  // MOVED and ASK followed so far
};

struct RedisClusterClient::Op {
  OpKind kind = OpKind::kGet;
  std::vector<std::string> keys;
  std::vector<RemoteWrite> writes;  // kSet: writes[i].key == keys[i]
  std::string ttl_ms;               // kSet: the PX argument
  Deadline deadline;
  // OK answers carry the value (kGet) or nothing; the others their Status.
  std::vector<Result<std::string>> answers;
  std::vector<Route> routes;
  std::vector<size_t> redirected;  // keys that go again in the next round
  GetCallback on_values;           // kGet
  StatusCallback on_statuses;      // the other kinds
  bool finished = false;

  Op(OpKind k, std::vector<std::string> ks, std::chrono::milliseconds timeout)
      : kind(k),
        keys(std::move(ks)),
        deadline(Deadline::clock::now() + timeout),
        answers(keys.size(), Result<std::string>(Internal("remote call ended without an answer"))),
        routes(keys.size()) {}

  // Hands the answers to the callback; once.
  void Finish() {
    if (finished) return;
    finished = true;
    if (kind == OpKind::kGet) {
      on_values(std::move(answers));
      return;
    }
    std::vector<Status> statuses;
    statuses.reserve(answers.size());
    for (const Result<std::string>& answer : answers) statuses.push_back(answer.status());
    on_statuses(std::move(statuses));
  }
};

}  // namespace kvtier::tiers::remote
