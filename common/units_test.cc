#include "common/units.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(UnitsTest, ParsesBinaryAndDecimalSuffixes) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseBytes("4GiB"), 4ull << 30);
  EXPECT_EQ(*ParseBytes("4g"), 4ull << 30);
  EXPECT_EQ(*ParseBytes("1.5 KiB"), 1536u);
  EXPECT_EQ(*ParseBytes("2GB"), 2'000'000'000u);
}

TEST(UnitsTest, RejectsNonsenseWithAClearMessage) {
  EXPECT_EQ(ParseBytes("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseBytes("-1GiB").status().code(), StatusCode::kInvalidArgument);
  Status st = ParseBytes("12 furlongs").status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("FURLONGS"), std::string::npos);
  EXPECT_FALSE(ParseBytes("99999999TiB").ok());
}

TEST(UnitsTest, FormatsForHumans) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(2 << 20), "2.0 MiB");
}

}  // namespace
}  // namespace kvtier
