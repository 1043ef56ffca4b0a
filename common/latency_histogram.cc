#include "common/latency_histogram.h"

#include <algorithm>

namespace kvtier {

std::string LatencyBucketLabel(size_t i) {
  if (i >= kLatencyFiniteBuckets) return "+Inf";
  // Microseconds as exact decimal seconds: "%g" of 2^i * 1e-6 would print 1.6000000000000001e-05.
  const uint64_t us = LatencyBucketBoundMicros(i);
  std::string fraction = std::to_string(us % 1'000'000);
  fraction.insert(0, 6 - fraction.size(), '0');
  fraction.erase(fraction.find_last_not_of('0') + 1);
  std::string out = std::to_string(us / 1'000'000);
  if (!fraction.empty()) out += "." + fraction;
  return out;
}

uint64_t LatencySnapshot::count() const { return CumulativeCount(kLatencyBuckets - 1); }

uint64_t LatencySnapshot::CumulativeCount(size_t i) const {
  uint64_t n = 0;
  for (size_t b = 0; b <= i && b < kLatencyBuckets; ++b) n += buckets[b];
  return n;
}

double LatencySnapshot::QuantileMicros(double q) const {
  const uint64_t total = count();
  if (total == 0) return 0;
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(total);
  uint64_t below = 0;
  for (size_t b = 0; b < kLatencyFiniteBuckets; ++b) {
    if (buckets[b] != 0 && static_cast<double>(below + buckets[b]) >= rank) {
      const double lower = b == 0 ? 0.0 : static_cast<double>(LatencyBucketBoundMicros(b - 1));
      const double upper = static_cast<double>(LatencyBucketBoundMicros(b));
      const double within = (rank - static_cast<double>(below)) / static_cast<double>(buckets[b]);
      return lower + (upper - lower) * std::max(within, 0.0);
    }
    below += buckets[b];
  }
  return static_cast<double>(LatencyBucketBoundMicros(kLatencyFiniteBuckets - 1));
}

LatencySnapshot& LatencySnapshot::operator+=(const LatencySnapshot& other) {
  for (size_t b = 0; b < kLatencyBuckets; ++b) buckets[b] += other.buckets[b];
  sum_ns += other.sum_ns;
  return *this;
}

LatencyHistograms::LatencyHistograms(size_t series)
    : series_(series),
      shard_cells_((series * kCellsPerSeries + kCellsPerLine - 1) / kCellsPerLine * kCellsPerLine),
      lines_(kShards * shard_cells_ / kCellsPerLine) {}

size_t LatencyHistograms::ThisThreadShard() {
  static std::atomic<size_t> next{0};
  thread_local const size_t shard = next.fetch_add(1, std::memory_order_relaxed) % kShards;
  return shard;
}

LatencySnapshot LatencyHistograms::Snapshot(size_t s) const {
  LatencySnapshot out;
  for (size_t shard = 0; shard < kShards; ++shard) {
    const size_t base = shard * shard_cells_ + s * kCellsPerSeries;
    for (size_t b = 0; b < kLatencyBuckets; ++b) {
      out.buckets[b] += Cell(base + b).load(std::memory_order_relaxed);
    }
    out.sum_ns += Cell(base + kLatencyBuckets).load(std::memory_order_relaxed);
  }
  return out;
}

}  // namespace kvtier
