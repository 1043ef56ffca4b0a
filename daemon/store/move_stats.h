// MoveStats: the store's moves of blocks between tiers (demotions, promotions), as a latency
// histogram per ordered pair of tiers and a count of the bytes each pair exchanged, for /metrics
// (kvtier_tier_move_duration_seconds, kvtier_tier_moved_bytes_total), /stats and INFO.
//
// A move is counted once its copy and its index update succeeded; one that failed moved nothing.
// A demotion into a write-through copy already on NVMe (Store::DemoteIntoShadow) copies no bytes
// and is not a move here. The time is that of the copy and the index update, from the moment the
// destination was allocated: what a move costs the mover thread or the request that made it. The
// blocks of a batch (Store::MovePinnedBatch: one submission to the device) each count the time
// from the batch's start to their own index update: how long each waited for its bytes to move.
//
// Owned by the Store. RecordMove from any thread (the mover's, the GPU mover's, a request's);
// Snapshot from any thread. With histograms off the bytes are still counted (two relaxed adds), but
// no clock is read and no time recorded.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "common/latency_histogram.h"
#include "common/types.h"

namespace kvtier::store {

struct MoveSeries {
  TierId from = TierId::kHost;
  TierId to = TierId::kNvme;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  bool timed = false;       // histograms on: `latency` holds the moves' times
  LatencySnapshot latency;  // empty unless timed

  // "demotion" (to a colder tier) or "promotion" (to a hotter one).
  const char* kind() const { return from < to ? "demotion" : "promotion"; }
};

class MoveStats {
 public:
  using Clock = std::chrono::steady_clock;

  explicit MoveStats(bool histograms);

  // When a move starts: now, or the epoch when histograms are off (then no clock is read).
  Clock::time_point Start() const { return histograms_ ? Clock::now() : Clock::time_point{}; }

  // Records one block of `bytes` moved from `from` to `to`, started at `started` (Start()).
  void RecordMove(TierId from, TierId to, uint64_t bytes, Clock::time_point started) {
    RecordMove(from, to, bytes, histograms_ ? Clock::now() - started : Clock::duration{});
  }
  // The same, for a caller that timed the move itself (a batch's share, say).
  void RecordMove(TierId from, TierId to, uint64_t bytes, std::chrono::nanoseconds elapsed) {
    const size_t pair = PairOf(from, to);
    bytes_[pair].fetch_add(bytes, std::memory_order_relaxed);
    blocks_[pair].fetch_add(1, std::memory_order_relaxed);
    if (histograms_) latency_.Record(pair, elapsed);
  }

  // One series per ordered pair of distinct tiers of `chain` (the store's tiers, hottest first),
  // moves or none: a counter that exists from the start lets rate() see its first increase.
  // Ordered by `from`, then `to`, both in chain order.
  std::vector<MoveSeries> Snapshot(std::span<const TierId> chain) const;

 private:
  static constexpr size_t kPairs = kTierCount * kTierCount;
  static size_t PairOf(TierId from, TierId to) {
    return static_cast<size_t>(from) * kTierCount + static_cast<size_t>(to);
  }

  const bool histograms_;
  std::array<std::atomic<uint64_t>, kPairs> bytes_{};
  std::array<std::atomic<uint64_t>, kPairs> blocks_{};
  LatencyHistograms latency_;  // one series per pair; none with histograms off
};

}  // namespace kvtier::store
