#include "daemon/cli/latency.h"

#include <algorithm>
#include <cmath>

namespace kvtier::cli {

void LatencyRecorder::Merge(const LatencyRecorder& other) {
  samples_ns_.insert(samples_ns_.end(), other.samples_ns_.begin(), other.samples_ns_.end());
}

LatencyRecorder::Summary LatencyRecorder::Summarize() const {
  Summary s;
  s.count = samples_ns_.size();
  if (s.count == 0) return s;
  std::vector<int64_t> sorted = samples_ns_;
  std::sort(sorted.begin(), sorted.end());
  // Nearest rank: the smallest sample with at least p% of the samples at or below it.
  auto at = [&](double p) {
    const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(s.count)));
    return static_cast<double>(sorted[std::clamp<size_t>(rank, 1, s.count) - 1]) / 1000.0;
  };
  double total = 0;
  for (int64_t v : sorted) total += static_cast<double>(v);
  s.mean_us = total / static_cast<double>(s.count) / 1000.0;
  s.p50_us = at(50);
  s.p99_us = at(99);
  s.max_us = static_cast<double>(sorted.back()) / 1000.0;
  return s;
}

}  // namespace kvtier::cli
