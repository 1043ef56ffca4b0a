// LeaseTable: the store's open leases (read pins on ready blocks), each with its deadline, so that
// a reader that vanishes cannot pin a block forever. The block's own lease count lives in the
// index; this table is what a lease id means.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/keys.h"
#include "common/thread_annotations.h"

namespace kvtier::store {

struct LeaseRecord {
  NamespaceId ns;
  BlockKey key;
  uint64_t deadline_us = 0;
  bool corrupt = false;  // a read found bad bytes or failed: the block goes when the lease ends
};

class LeaseTable {
 public:
  // At most `max_leases` open at once: each costs memory, and a local client could otherwise
  // open millions over many connections.
  explicit LeaseTable(size_t max_leases) : max_(max_leases) {}

  bool Full() const;
  size_t max() const { return max_; }
  void Add(uint64_t id, const LeaseRecord& record);
  // Ends a lease: its record, or nullopt when unknown (released or timed out).
  std::optional<LeaseRecord> Take(uint64_t id);
  // false when the lease already ended.
  bool Renew(uint64_t id, uint64_t deadline_us);
  // The lease's namespace; nullopt when it ended.
  std::optional<NamespaceId> NamespaceOf(uint64_t id) const;
  // Marks an open lease's block for dropping when it ends.
  void MarkCorrupt(uint64_t id);
  // Ends every lease whose deadline is at or before `now_us` and returns their records.
  std::vector<LeaseRecord> TakeExpired(uint64_t now_us);
  size_t size() const;

 private:
  const size_t max_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, LeaseRecord> leases_ GUARDED_BY(mu_);
};

}  // namespace kvtier::store
