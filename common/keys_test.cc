#include "common/keys.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(KeysTest, HexRoundTripsHighHalfFirst) {
  Key128 k{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(k.ToHex(), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(Key128::FromHex(k.ToHex()), k);
  EXPECT_EQ(Key128::FromHex("0123456789ABCDEFFEDCBA9876543210"), k);
}

TEST(KeysTest, MalformedHexIsRejected) {
  EXPECT_FALSE(Key128::FromHex("").has_value());
  EXPECT_FALSE(Key128::FromHex("0123").has_value());
  EXPECT_FALSE(Key128::FromHex("0123456789abcdeffedcba987654321g").has_value());
}

TEST(KeysTest, BytesAreBigEndian) {
  Key128 k{0x0102030405060708ULL, 0x090a0b0c0d0e0f10ULL};
  std::byte b[16];
  k.ToBytes(b);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(static_cast<int>(b[i]), i + 1);
  EXPECT_EQ(Key128::FromBytes(b), k);
}

}  // namespace
}  // namespace kvtier
