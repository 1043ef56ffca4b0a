// RemoteStore: a key-value store shared by a fleet of kvtierd nodes, below the NVMe tier.
//
// The remote tier keeps immutable, content-addressed blocks (remote_record.h) in a store that the
// operator runs: Redis Cluster first (RedisClusterClient), an object store later. This interface is
// what such a store must offer: batches of opaque keys (RemoteKey) read, written with a time to
// live, tested and deleted, each key answered on its own, every batch bounded by a timeout. A store
// that is slow or down costs hits, never a thread: calls return by their deadline.
//
// Two ways to call:
// - Start*(): asynchronous. The callback runs exactly once, on the store's own I/O thread, after
//   every key of the batch is answered or the timeout passed. It must not block and must not call
//   the blocking methods (they would wait on the thread that has to answer them).
// - Get()/Set()/Exists()/Delete(): the same, blocking the calling thread until the callback ran
//   (the TierMover's threads). Called on the store's I/O thread they answer kInternal at once.
//
// Per-key answers use the project's error vocabulary (common/status.h):
//   OK                 the key was read, written, exists or was deleted
//   kNotFound          a miss: the key does not exist (Get, Exists, Delete)
//   kTimeout           the timeout passed before the store answered
//   kDeviceError       the store failed: connection refused or lost, an error reply, a broken
//                      protocol, a slot that no node serves
//   kBusy              the store refused for now (out of memory, loading, a node skipped by its
//                      circuit breaker): try later
//   kPermissionDenied  the store refused the credentials
//   kShuttingDown      the store is being destroyed
// A caller treats every non-OK answer of Get as a miss, and counts it.
//
// Implementations are thread-safe: any thread may start calls, concurrently.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvtier::tiers::remote {

// One value to write: its key and its bytes in pieces (a record header and the payload, say), which
// are sent one after the other without being joined. The pieces are borrowed: they must stay valid
// and unchanged until the call's callback has run (or the blocking call returned).
struct RemoteWrite {
  std::string key;
  std::vector<std::string_view> value_parts;
};

class RemoteStore {
 public:
  using GetCallback = std::function<void(std::vector<Result<std::string>> values)>;
  using StatusCallback = std::function<void(std::vector<Status> statuses)>;

  virtual ~RemoteStore() = default;

  // Reads `keys`; values[i] answers keys[i]: the bytes, or kNotFound on a miss, or an error.
  virtual void StartGet(std::vector<std::string> keys, std::chrono::milliseconds timeout,
                        GetCallback done) = 0;
  // Writes each value with a time to live of `ttl` (at least 1 ms), replacing what the key held.
  virtual void StartSet(std::vector<RemoteWrite> writes, std::chrono::milliseconds ttl,
                        std::chrono::milliseconds timeout, StatusCallback done) = 0;
  // OK for a key that exists, kNotFound for one that does not.
  virtual void StartExists(std::vector<std::string> keys, std::chrono::milliseconds timeout,
                           StatusCallback done) = 0;
  // OK for a key that was deleted, kNotFound for one that was not there.
  virtual void StartDelete(std::vector<std::string> keys, std::chrono::milliseconds timeout,
                           StatusCallback done) = 0;

  // The store's own counters (for the Redis client, remote_stats.h: timeouts, breaker openings,
  // redirects, bytes), one visit(name, value) each with a stable snake_case name, so that the
  // daemon's statistics show them; none by default. Any thread.
  virtual void VisitStats(
      const std::function<void(std::string_view name, double value)>& visit) const {}

  // Blocking forms of the above: same answers, returned.
  std::vector<Result<std::string>> Get(std::vector<std::string> keys,
                                       std::chrono::milliseconds timeout);
  std::vector<Status> Set(std::vector<RemoteWrite> writes, std::chrono::milliseconds ttl,
                          std::chrono::milliseconds timeout);
  std::vector<Status> Exists(std::vector<std::string> keys, std::chrono::milliseconds timeout);
  std::vector<Status> Delete(std::vector<std::string> keys, std::chrono::milliseconds timeout);

 protected:
  // True on the thread that runs the callbacks, where the blocking forms must not wait.
  virtual bool OnCallbackThread() const = 0;
};

}  // namespace kvtier::tiers::remote
