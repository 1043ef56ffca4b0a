// PayloadChecksum must give the library's XXH3-64 for every length and alignment, on whichever
// implementation this CPU runs: blocks written by one build or machine are verified by another.
#include "hashing/payload_checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hashing/payload_checksum_avx2.h"

namespace kvtier::hashing {
namespace {

std::vector<std::byte> Pattern(size_t n) {
  std::vector<std::byte> out(n);
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<std::byte>(x);
  }
  return out;
}

// XXH3 has separate code for 0, 1-3, 4-8, 9-16, 17-128, 129-240 bytes and for longer inputs
// (stripes of 64 bytes, blocks of 1 KiB): a length on each side of every boundary, odd offsets,
// and the block sizes engines use.
const size_t kLengths[] = {0,    1,    3,         4,     8,      9,      16,         17,
                           128,  129,  240,       241,   255,    1023,   1024,       1025,
                           4095, 4096, 65536 + 7, 16384, 131072, 262144, 2097152 + 3};

TEST(PayloadChecksumTest, EqualsTheLibrarysXxh3ForEveryLengthAndOffset) {
  const std::vector<std::byte> data = Pattern((2 << 20) + 64);
  for (size_t n : kLengths) {
    for (size_t offset : {0, 1, 7, 32}) {
      const std::byte* p = data.data() + offset;
      EXPECT_EQ(PayloadChecksum({p, n}), XXH3_64bits(p, n)) << n << " bytes at +" << offset;
    }
  }
}

TEST(PayloadChecksumTest, ASingleFlippedBitChangesIt) {
  std::vector<std::byte> data = Pattern(262144);
  const uint64_t before = PayloadChecksum(data);
  data[123457] ^= std::byte{0x10};
  EXPECT_NE(PayloadChecksum(data), before);
}

#if KVTIER_PAYLOAD_CHECKSUM_AVX2
// The AVX2 build itself, where the CPU has it: the dispatch above may have chosen the library,
// which would leave this build untested on such a machine.
TEST(PayloadChecksumTest, TheAvx2BuildEqualsTheLibrarysXxh3) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "this CPU has no AVX2";
  EXPECT_EQ(PayloadChecksumImplementation(), "avx2");
  const std::vector<std::byte> data = Pattern((2 << 20) + 64);
  for (size_t n : kLengths) {
    EXPECT_EQ(detail::PayloadChecksumAvx2(data.data() + 3, n), XXH3_64bits(data.data() + 3, n))
        << n << " bytes";
  }
}
#endif

}  // namespace
}  // namespace kvtier::hashing
