// RequestLatency: how long kvtierd takes to serve lookups, gets and puts, as latency histograms by
// operation, data path and tier, for /metrics (kvtier_request_duration_seconds), /stats and INFO.
//
// One observation per command (a KVT.GET of 16 keys is one get), from the moment the command is
// parsed until its handler is done, waits for readers and for the tier mover included; the time
// its reply then takes on the network is not. The labels:
// - op: lookup (KVT.LOOKUP, EXISTS), get (KVT.GET, KVT.ACQUIRE, GET, MGET), put (KVT.PUT,
//   KVT.RESERVE, SET, MSET), commit (KVT.COMMIT: a shared-memory put is two round trips, RESERVE
//   then COMMIT, with the client's copy between them; with nvme.write_through the commit is where
//   the disk write happens).
// - path: shm (KVT.RESERVE/COMMIT/ACQUIRE, and KVT.LOOKUP of a client that attached the arena),
//   inline (KVT.PUT/GET, KVT.LOOKUP of any other client), generic (GET/SET/MGET/MSET/EXISTS).
// - tier: the coldest tier the command found its blocks in (lookup, get; nvme also when a read
//   waited for a block to come up from NVMe), or placed them in (put, commit); none when it
//   found or placed none (a miss, a refused put).
//
// Owned by the server (ServerContext); Record from any network thread, Snapshot from any thread.
// A disabled RequestLatency (metrics.histograms: false) holds no histograms and records nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/latency_histogram.h"
#include "common/types.h"

namespace kvtier::metrics {

enum class RequestOp : uint8_t { kLookup, kGet, kPut, kCommit };
inline constexpr size_t kRequestOpCount = 4;
enum class RequestPath : uint8_t { kShm, kInline, kGeneric };
inline constexpr size_t kRequestPathCount = 3;

std::string_view RequestOpName(RequestOp op);        // "lookup", "get", "put", "commit"
std::string_view RequestPathName(RequestPath path);  // "shm", "inline", "generic"
// A tier's label value: TierName, or "none".
std::string_view RequestTierName(std::optional<TierId> tier);

// What a command's latency is recorded under. A handler names its op and path, then reports each
// tier it found or placed a block in; the coldest one stays.
struct RequestLabels {
  RequestOp op = RequestOp::kLookup;
  RequestPath path = RequestPath::kInline;
  std::optional<TierId> tier;

  void Found(TierId t) {
    if (!tier || static_cast<int>(t) > static_cast<int>(*tier)) tier = t;
  }
};

struct RequestLatencySeries {
  RequestLabels labels;
  LatencySnapshot latency;
};

class RequestLatency {
 public:
  explicit RequestLatency(bool enabled);

  bool enabled() const { return histograms_.series() != 0; }

  void Record(const RequestLabels& labels, std::chrono::nanoseconds elapsed) {
    if (enabled()) histograms_.Record(SeriesOf(labels), elapsed);
  }

  // Every series with at least one observation, ordered by op, path, then tier (hottest first,
  // none last). Empty when disabled.
  std::vector<RequestLatencySeries> Snapshot() const;

 private:
  static constexpr size_t kTierLabels = kTierCount + 1;  // the tiers, then none

  static size_t SeriesOf(const RequestLabels& labels) {
    const size_t tier = labels.tier ? static_cast<size_t>(*labels.tier) : kTierCount;
    return (static_cast<size_t>(labels.op) * kRequestPathCount + static_cast<size_t>(labels.path)) *
               kTierLabels +
           tier;
  }

  LatencyHistograms histograms_;
};

}  // namespace kvtier::metrics
