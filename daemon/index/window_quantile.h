// WindowQuantile: a quantile of the last `window` values of a stream of 32-bit values, exact (the
// value std::nth_element would pick at that rank), without selecting over the whole window.
//
// StickyLruPolicy re-estimates its reuse gap G, the 75th percentile of the last 4,096 gaps, every
// 64 gaps: an 8,192-key lookup measures 512 gaps, and a copy and nth_element of the window 8
// times was an eighth of its time. Here a count per bucket of value (log-linear: 16 buckets per
// power of two, so a bucket spans at most 1/16 of its values) follows the window as values come
// and go; a quantile walks the counts to the bucket that holds its rank and selects only among
// the window's values in that bucket.
//
// Thread safety: none (owned by one policy, which its owner locks).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier::index {

class WindowQuantile {
 public:
  // `window` at least 1.
  explicit WindowQuantile(size_t window) : window_(window) {}

  // Adds `value`; past `window` values, the oldest leaves.
  void Add(uint32_t value);
  // The value of rank floor(size() * q) among the window's values in ascending order (0-based).
  // Preconditions: size() > 0 and 0 <= q < 1.
  uint32_t Quantile(double q);
  size_t size() const { return values_.size(); }

 private:
  static constexpr int kSubBits = 4;  // 16 buckets per power of two
  static constexpr uint32_t kLinear = uint32_t{1} << kSubBits;
  // Values below kLinear have a bucket each; then each power of two [2^e, 2^(e+1)) has
  // kLinear buckets.
  static constexpr size_t kBuckets = kLinear + (32 - kSubBits) * kLinear;
  static size_t BucketOf(uint32_t value);
  // The smallest value of `bucket`; BucketStart(kBuckets) is 2^32.
  static uint64_t BucketStart(size_t bucket);

  size_t window_;
  std::vector<uint32_t> values_;  // a ring once full: next_ is the oldest
  size_t next_ = 0;
  std::array<uint32_t, kBuckets> counts_{};
  std::vector<uint32_t> scratch_;  // the values of the quantile's bucket
};

}  // namespace kvtier::index
