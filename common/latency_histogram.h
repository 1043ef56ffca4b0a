// LatencyHistograms: fixed-bucket latency histograms for the daemon's hot paths (requests, moves
// between tiers), and LatencySnapshot, the plain numbers one of them holds at a moment.
//
// Buckets are powers of two microseconds: bucket i counts durations of at most 2^i us, for i in
// [0, 24] (1 us .. 16.8 s), and the last bucket counts the rest (+Inf). Factor-two edges let an
// observation find its bucket with one bit_width, no search and no floating point; a quantile read
// from them is interpolated within one bucket, which is as close as an operator's p99 needs (and
// finer than Prometheus' default buckets).
//
// A LatencyHistograms holds a fixed number of series (one per label combination; the owner numbers
// them), all allocated at construction. Record allocates nothing and takes no lock: two relaxed
// fetch_adds on counters of the calling thread's shard. Threads are spread over kShards shards,
// each on cache lines of its own, so the network threads do not bounce lines between cores as a
// single set of counters would. Snapshot sums the shards; it is not a consistent cut (an
// observation may be in its bucket and not yet in the sum), which monitoring does not need.
//
// Thread safety: Record and Snapshot may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvtier {

inline constexpr size_t kLatencyFiniteBuckets = 25;                   // 2^0 .. 2^24 us
inline constexpr size_t kLatencyBuckets = kLatencyFiniteBuckets + 1;  // and +Inf

// The bucket a duration of `ns` nanoseconds falls in: the first whose bound it does not exceed.
constexpr size_t LatencyBucketIndex(uint64_t ns) {
  // ns <= 2^i * 1000 exactly when ceil(ns / 1000) <= 2^i, so whole microseconds, rounded up,
  // decide.
  const uint64_t us = ns / 1000 + (ns % 1000 != 0 ? 1 : 0);
  if (us <= 1) return 0;
  const size_t i = static_cast<size_t>(std::bit_width(us - 1));
  return i < kLatencyFiniteBuckets ? i : kLatencyFiniteBuckets;
}

// The upper bound of bucket i in microseconds; bucket kLatencyFiniteBuckets (+Inf) has none.
constexpr uint64_t LatencyBucketBoundMicros(size_t i) { return uint64_t{1} << i; }

// The `le` label of bucket i as Prometheus reads it: exact decimal seconds ("0.000001", "0.000016",
// "16.777216"), "+Inf" for the last.
std::string LatencyBucketLabel(size_t i);

struct LatencySnapshot {
  std::array<uint64_t, kLatencyBuckets> buckets{};  // observations per bucket, not cumulative
  uint64_t sum_ns = 0;

  uint64_t count() const;
  double sum_seconds() const { return static_cast<double>(sum_ns) * 1e-9; }
  // Observations of at most bucket i's bound: the `_bucket{le=...}` sample. For the last bucket
  // (+Inf) this is count().
  uint64_t CumulativeCount(size_t i) const;
  // The q-quantile (q in [0, 1]) in microseconds, estimated as Prometheus' histogram_quantile
  // does: linear interpolation within the bucket that holds it (from 0 in the first). A quantile
  // that falls in +Inf is reported as the largest finite bound. 0 when there is no observation.
  double QuantileMicros(double q) const;

  LatencySnapshot& operator+=(const LatencySnapshot& other);
};

class LatencyHistograms {
 public:
  static constexpr size_t kShards = 16;

  // `series` histograms, each empty. 0 series: Record must not be called (a disabled set).
  explicit LatencyHistograms(size_t series);

  LatencyHistograms(const LatencyHistograms&) = delete;
  LatencyHistograms& operator=(const LatencyHistograms&) = delete;

  size_t series() const { return series_; }

  // Adds one observation to series `s` (< series()). A negative duration counts as 0.
  void Record(size_t s, std::chrono::nanoseconds elapsed) {
    const uint64_t ns = elapsed.count() > 0 ? static_cast<uint64_t>(elapsed.count()) : 0;
    const size_t base = ThisThreadShard() * shard_cells_ + s * kCellsPerSeries;
    Cell(base + LatencyBucketIndex(ns)).fetch_add(1, std::memory_order_relaxed);
    Cell(base + kLatencyBuckets).fetch_add(ns, std::memory_order_relaxed);
  }

  // Series `s`, summed over the shards.
  LatencySnapshot Snapshot(size_t s) const;

 private:
  // The buckets of a series, then its sum in nanoseconds.
  static constexpr size_t kCellsPerSeries = kLatencyBuckets + 1;
  static constexpr size_t kCellsPerLine = 8;  // 64-byte cache lines of uint64_t

  struct alignas(64) Line {
    std::array<std::atomic<uint64_t>, kCellsPerLine> cells{};
  };

  // This thread's shard: threads take shards round robin as they first record.
  static size_t ThisThreadShard();

  std::atomic<uint64_t>& Cell(size_t i) {
    return lines_[i / kCellsPerLine].cells[i % kCellsPerLine];
  }
  const std::atomic<uint64_t>& Cell(size_t i) const {
    return lines_[i / kCellsPerLine].cells[i % kCellsPerLine];
  }

  size_t series_;
  size_t shard_cells_;  // cells per shard, rounded up to whole lines
  std::vector<Line> lines_;
};

}  // namespace kvtier
