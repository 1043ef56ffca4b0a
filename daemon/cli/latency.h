// LatencyRecorder: the latencies of one kind of operation, summarised as percentiles for
// `kvtier bench` and `kvtier replay`.
//
// Every sample is kept (8 bytes each: a million operations cost 8 MB), so percentiles are exact
// rather than bucketed; the runs these tools make are bounded by --count and --limit. One
// recorder per thread; Merge() them at the end. Not synchronised.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier::cli {

class LatencyRecorder {
 public:
  struct Summary {
    size_t count = 0;
    double mean_us = 0;
    double p50_us = 0;
    double p99_us = 0;
    double max_us = 0;
  };

  void Add(std::chrono::nanoseconds latency) { samples_ns_.push_back(latency.count()); }
  void Merge(const LatencyRecorder& other);
  size_t count() const { return samples_ns_.size(); }

  // Nearest-rank percentiles over all samples; all zero when there are none.
  Summary Summarize() const;

 private:
  std::vector<int64_t> samples_ns_;
};

}  // namespace kvtier::cli
