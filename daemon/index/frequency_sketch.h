// FrequencySketch: an approximate, aging count of how often each block key was used recently.
//
// The count-min sketch of TinyLFU (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient
// Cache Admission Policy", ACM ToS 2017), laid out as Caffeine's FrequencySketch: 4-bit counters,
// sixteen to a 64-bit word, one word per expected cached key (rounded up to a power of two), and
// four counters per key, each in its own row of the word. A key's estimate is the least of its
// four counters, so collisions can only raise it. After `10 x capacity` increments every counter
// is halved (the "reset" of the paper): the counts describe a window of about ten cache turnovers
// and a block hot long ago fades. Both constants are the paper's and Caffeine's, not tuned to a
// trace: 4 bits because an estimate above 15 never changes an admission decision, and a sample of
// 10 x capacity, the size the paper's error bound is given for.
//
// Memory: 8 bytes per expected cached key. Thread safety: none (owned by one policy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/keys.h"

namespace kvtier::index {

class FrequencySketch {
 public:
  // Sized for `capacity_blocks` keys (at least 1). Every count starts at 0.
  explicit FrequencySketch(size_t capacity_blocks);

  // Records one use of `key`; may halve every counter (see above).
  void Increment(const BlockKey& key);
  // The estimated uses of `key` since about the last reset, in [0, 15].
  uint32_t Frequency(const BlockKey& key) const;

  size_t capacity_blocks() const { return capacity_blocks_; }
  // Increments since the last halving, for tests.
  size_t sample_count() const { return sample_count_; }
  size_t sample_size() const { return sample_size_; }

 private:
  static constexpr uint64_t kMaxCount = 15;

  // The word holding counter `row` of the key with spread hash `hash`.
  size_t WordIndex(uint64_t hash, int row) const;
  void Reset();

  size_t capacity_blocks_;
  std::vector<uint64_t> table_;  // power-of-two size
  size_t sample_size_;
  size_t sample_count_ = 0;
};

}  // namespace kvtier::index
