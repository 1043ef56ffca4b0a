#include "daemon/index/frequency_sketch.h"

#include <gtest/gtest.h>

namespace kvtier::index {
namespace {

BlockKey Key(uint64_t n) { return BlockKey{{n * 0x9E3779B97F4A7C15ULL, n}}; }

TEST(FrequencySketchTest, CountsUsesUpToFifteen) {
  FrequencySketch sketch(1024);
  EXPECT_EQ(sketch.Frequency(Key(1)), 0u);
  for (uint32_t i = 1; i <= 20; ++i) {
    sketch.Increment(Key(1));
    EXPECT_EQ(sketch.Frequency(Key(1)), std::min(i, 15u));
  }
}

// Collisions can only raise an estimate; with a table sized for the keys, most are exact.
TEST(FrequencySketchTest, EstimatesNeverUndercountAndMostlyExact) {
  constexpr uint64_t kKeys = 1000;
  FrequencySketch sketch(kKeys);
  for (uint64_t k = 0; k < kKeys; ++k) {
    for (uint64_t i = 0; i < k % 4; ++i) sketch.Increment(Key(k));
  }
  size_t exact = 0;
  for (uint64_t k = 0; k < kKeys; ++k) {
    ASSERT_GE(sketch.Frequency(Key(k)), k % 4) << k;
    exact += sketch.Frequency(Key(k)) == k % 4;
  }
  EXPECT_GT(exact, kKeys * 9 / 10);
}

TEST(FrequencySketchTest, HalvesEveryCountAfterTenTimesTheCapacity) {
  FrequencySketch sketch(16);
  ASSERT_EQ(sketch.sample_size(), 160u);
  for (int i = 0; i < 8; ++i) sketch.Increment(Key(1));
  ASSERT_GE(sketch.Frequency(Key(1)), 8u);
  // Other keys fill the sample until the reset, seen as the sample count dropping.
  uint64_t k = 2;
  for (size_t before = sketch.sample_count(); sketch.sample_count() >= before; ++k) {
    before = sketch.sample_count();
    sketch.Increment(Key(k));
    ASSERT_LT(k, 10000u) << "no reset";
  }
  EXPECT_LE(sketch.sample_count(), sketch.sample_size() / 2);
  // 8 halves to 4; collisions in so small a table may have raised it, to at most 15 / 2.
  EXPECT_GE(sketch.Frequency(Key(1)), 4u);
  EXPECT_LE(sketch.Frequency(Key(1)), 7u);
}

}  // namespace
}  // namespace kvtier::index
