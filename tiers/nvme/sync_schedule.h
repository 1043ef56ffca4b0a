// SyncSchedule: when kvtierd's periodic NVMe sync (NvmeTier::Sync) runs.
//
// Two kinds of block, two promises. A write-through copy is acknowledged to its client as durable:
// a power cut may lose at most `acknowledged_ms` of those. Every other block on NVMe is cold
// cache: losing it to a power cut costs a miss, never wrong bytes (a record or payload that did
// not reach the disk fails its first read, docs/nvme-format.md), so it is synced only every
// `cache_ms`, or with a write-through copy's sync, or at a clean stop. A sync is not free: on a
// disk with a volatile write cache each flush took 0.1 to 1 s whatever was written before it, and
// reads and writes queue behind it, so syncing spilled cache every second stalled puts for up to
// 700 ms (KVTIER_SPILL_CACHE_SYNC_MS=1000 bash bench/spill_bench.sh). Nothing written since the
// last sync: no sync.
//
// Thread safety: none (one housekeeping thread asks it).
#pragma once

#include <cstdint>

#include "tiers/nvme/nvme_tier.h"

namespace kvtier::tiers::nvme {

class SyncSchedule {
 public:
  struct Intervals {
    uint64_t acknowledged_ms = 1000;  // > 0
    uint64_t cache_ms = 60'000;       // 0: the cold cache is never synced on its own
  };

  // `now_ms` starts the first interval (any steady origin, the same as Due's).
  SyncSchedule(const Intervals& intervals, uint64_t now_ms);

  // How often to ask Due.
  uint64_t tick_ms() const;
  // Whether to sync now, given what was written since the last sync. A true answer starts the
  // next interval (whether or not the sync then succeeds: a failing disk is not retried faster).
  bool Due(const NvmeTier::UnsyncedWrites& pending, uint64_t now_ms);

 private:
  Intervals intervals_;
  uint64_t last_sync_ms_;
};

}  // namespace kvtier::tiers::nvme
