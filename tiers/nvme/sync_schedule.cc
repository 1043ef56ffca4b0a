#include "tiers/nvme/sync_schedule.h"

#include <algorithm>

namespace kvtier::tiers::nvme {

SyncSchedule::SyncSchedule(const Intervals& intervals, uint64_t now_ms)
    : intervals_(intervals), last_sync_ms_(now_ms) {}

uint64_t SyncSchedule::tick_ms() const {
  return intervals_.cache_ms == 0 ? intervals_.acknowledged_ms
                                  : std::min(intervals_.acknowledged_ms, intervals_.cache_ms);
}

bool SyncSchedule::Due(const NvmeTier::UnsyncedWrites& pending, uint64_t now_ms) {
  const uint64_t since = now_ms - std::min(now_ms, last_sync_ms_);
  // The tick may come a little early; a sync that is nearly due now is due.
  const uint64_t slack = tick_ms() / 10;
  const bool due =
      (pending.acknowledged > 0 && since + slack >= intervals_.acknowledged_ms) ||
      (pending.blocks > 0 && intervals_.cache_ms > 0 && since + slack >= intervals_.cache_ms);
  if (due) last_sync_ms_ = now_ms;
  return due;
}

}  // namespace kvtier::tiers::nvme
