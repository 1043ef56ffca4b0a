// ReservationTable: the store's open reservations (slots being written by a put), each with its
// deadline. A reservation that times out is not forgotten at once: its block leaves the index,
// but its slot stays set aside (quarantined) until the writer says COMMIT or ABORT or a long
// grace period passes, so that a writer who wakes up late scribbles only on space nobody else was
// given.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/keys.h"
#include "common/thread_annotations.h"
#include "common/types.h"

namespace kvtier::store {

struct ReservationRecord {
  NamespaceId ns;
  BlockKey key;
  TierId tier = TierId::kHost;
  Extent extent;
  uint64_t generation = 0;
  uint64_t deadline_us = 0;
  bool expired = false;  // timed out: quarantined, see above
};

class ReservationTable {
 public:
  // At most `max_reservations` open at once (their memory, as for leases).
  explicit ReservationTable(size_t max_reservations) : max_(max_reservations) {}

  bool Full() const;
  size_t max() const { return max_; }
  void Add(uint64_t id, const ReservationRecord& record);
  // The record of reservation `id`, removed from the table when `erase`; nullopt when unknown.
  std::optional<ReservationRecord> Find(uint64_t id, bool erase);
  // false when the reservation is not open any more (finished, or timed out).
  bool Renew(uint64_t id, uint64_t deadline_us);
  // Quarantines open reservation `id` until `until_us`, as if it had timed out now; its record,
  // or nullopt when it is unknown or already quarantined.
  std::optional<ReservationRecord> Quarantine(uint64_t id, uint64_t until_us);

  struct Expired {
    std::vector<ReservationRecord> timed_out;  // now quarantined: their blocks go now
    std::vector<ReservationRecord> released;   // quarantine over: removed, their space is free
  };
  // Open reservations whose deadline passed become quarantined until now + `quarantine_us`;
  // quarantined ones past that leave the table.
  Expired Expire(uint64_t now_us, uint64_t quarantine_us);
  size_t quarantined() const;

 private:
  const size_t max_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, ReservationRecord> reservations_ GUARDED_BY(mu_);
};

}  // namespace kvtier::store
