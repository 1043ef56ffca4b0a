#include "daemon/index/frequency_sketch.h"

#include <algorithm>
#include <bit>

namespace kvtier::index {
namespace {

// Caffeine's per-row seeds (64-bit primes) for deriving four word positions from one hash.
constexpr uint64_t kSeeds[4] = {0xc3a5c85c97cb3127ULL, 0xb492b66fbe98f273ULL, 0x9ae16a3b2f90404fULL,
                                0xcbf29ce484222325ULL};

uint64_t Spread(const BlockKey& key) {
  uint64_t z = Key128Hash()(key);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The key's counter in `row` is number `Start(hash) + row` of its word: the rows use four
// different nibbles of the sixteen, chosen by the hash, so keys sharing a word seldom share all
// four counters.
int CounterOf(uint64_t hash, int row) { return static_cast<int>((hash & 3) << 2) + row; }

}  // namespace

FrequencySketch::FrequencySketch(size_t capacity_blocks)
    : capacity_blocks_(std::max<size_t>(1, capacity_blocks)),
      table_(std::bit_ceil(capacity_blocks_), 0),
      sample_size_(10 * capacity_blocks_) {}

size_t FrequencySketch::WordIndex(uint64_t hash, int row) const {
  uint64_t h = (hash + kSeeds[row]) * kSeeds[row];
  h += h >> 32;
  return static_cast<size_t>(h) & (table_.size() - 1);
}

void FrequencySketch::Increment(const BlockKey& key) {
  const uint64_t hash = Spread(key);
  bool added = false;
  for (int row = 0; row < 4; ++row) {
    uint64_t& word = table_[WordIndex(hash, row)];
    const int shift = CounterOf(hash, row) * 4;
    if (((word >> shift) & kMaxCount) < kMaxCount) {
      word += uint64_t{1} << shift;
      added = true;
    }
  }
  // A key whose counters are all saturated adds nothing, as in Caffeine: the sample counts
  // information gained, and a reset would otherwise come early under a few very hot keys.
  if (added && ++sample_count_ >= sample_size_) Reset();
}

uint32_t FrequencySketch::Frequency(const BlockKey& key) const {
  const uint64_t hash = Spread(key);
  uint64_t least = kMaxCount;
  for (int row = 0; row < 4; ++row) {
    const uint64_t word = table_[WordIndex(hash, row)];
    least = std::min(least, (word >> (CounterOf(hash, row) * 4)) & kMaxCount);
  }
  return static_cast<uint32_t>(least);
}

// Halves every counter at once: shift the word right by one and clear the bit that crossed from
// each counter into its lower neighbour. The sample count halves too, less the halves lost to
// truncation (a quarter of the odd counters, each key having four), as Caffeine does.
void FrequencySketch::Reset() {
  size_t odd = 0;
  for (uint64_t& word : table_) {
    odd += static_cast<size_t>(std::popcount(word & 0x1111111111111111ULL));
    word = (word >> 1) & 0x7777777777777777ULL;
  }
  sample_count_ = (sample_count_ - std::min(sample_count_, odd / 4)) / 2;
}

}  // namespace kvtier::index
