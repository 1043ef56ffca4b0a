// DepartureLog: a bounded record of the blocks that left this node, and why (evicted from the last
// tier, dropped as corrupt, removed by a client, their namespace dropped), for KVT.EXPLAIN.
//
// The store records every departure; KVT.EXPLAIN asks, for the keys of a prompt, what the newest
// departure of each was. The log is a set of fixed-size rings (one per shard of the key space, so
// that evictions on many threads rarely meet on one lock): each holds the last capacity/shards
// departures of its keys and overwrites its oldest entry when full. Nothing is allocated after
// construction; a record costs one uncontended lock and a 64-byte copy. Memory: 64 bytes per entry
// (the default 65,536 entries are 4 MiB). A key whose departure was overwritten, or that left
// before the daemon started, is indistinguishable from one never stored: Find answers nullopt.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/keys.h"
#include "common/thread_annotations.h"
#include "common/types.h"

namespace kvtier::store {

enum class DepartureReason : uint8_t {
  kEvicted,           // an eviction dropped it (see EvictionCause)
  kCorrupt,           // its bytes failed verification (checksum mismatch) or a read (device
                      // error), and it was dropped
  kRemoved,           // a client removed it (KVT.DEL)
  kNamespaceDropped,  // its namespace was dropped (KVT.DROP)
};

// Why an evicted block was dropped rather than moved one tier down.
enum class EvictionCause : uint8_t {
  kNone,              // not an eviction
  kLastTier,          // it was in the last local tier: nothing below
  kAdmissionRefused,  // the NVMe admission policy refused it (nvme.admission)
  kDiskLag,           // the disk could not take it in time (drop_when_disk_lags)
  kNoRoomBelow,       // the tier below had no room, or the copy down failed
};

// "evicted", "corrupt", "removed", "namespace_dropped".
std::string_view DepartureReasonName(DepartureReason reason);
// "none", "last_tier", "admission_refused", "disk_lag", "no_room_below".
std::string_view EvictionCauseName(EvictionCause cause);

struct Departure {
  BlockKey key;
  NamespaceId ns;
  uint64_t at_us = 0;            // the store's clock (monotonic) when it left
  uint64_t tier_used_bytes = 0;  // the tier's fill when it left (pressure), victim included
  uint64_t tier_capacity_bytes = 0;
  TierId tier = TierId::kHost;  // the tier it left from
  DepartureReason reason = DepartureReason::kEvicted;
  EvictionCause cause = EvictionCause::kNone;
};
static_assert(sizeof(Departure) == 64, "the log's memory figure in the header assumes 64 bytes");

class DepartureLog {
 public:
  // How many rings the entries are spread over.
  static constexpr size_t kShards = 16;
  // Keeps about `capacity` departures in all (rounded up to a multiple of kShards; 0 records
  // nothing).
  explicit DepartureLog(size_t capacity);

  // Records a departure, overwriting the oldest of its shard when that is full. Never allocates.
  void Record(const Departure& departure);

  // For each of `keys`, the newest departure recorded for it in namespace `ns`, or nullopt.
  // Scans every ring once (each under its lock), so it costs O(capacity + keys.size()): for
  // diagnostics, not for the request path.
  std::vector<std::optional<Departure>> Find(const NamespaceId& ns,
                                             std::span<const BlockKey> keys) const;

  // Entries the log can hold, and departures recorded since start (held or overwritten).
  size_t capacity() const { return per_shard_ * kShards; }
  uint64_t recorded() const;

 private:
  struct Shard {
    mutable Mutex mu;
    std::unique_ptr<Departure[]> ring GUARDED_BY(mu);
    uint64_t next GUARDED_BY(mu) = 0;  // departures recorded in this shard; next % size is the slot
  };

  const size_t per_shard_;
  std::array<Shard, kShards> shards_;
};

}  // namespace kvtier::store
