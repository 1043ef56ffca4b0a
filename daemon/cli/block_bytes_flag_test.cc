#include "daemon/cli/block_bytes_flag.h"

#include <gtest/gtest.h>

#include <string>

namespace kvtier::cli {
namespace {

TEST(ParseBlockBytesTest, AcceptsUpToOneGibibyte) {
  EXPECT_EQ(ParseBlockBytes("4096").value(), 4096u);
  EXPECT_EQ(ParseBlockBytes("1GiB").value(), kMaxBlockBytes);
}

// Regression: "1TiB" passed and bench and replay died of bad_alloc allocating one block.
TEST(ParseBlockBytesTest, RefusesZeroGarbageAndMoreThanOneGibibyte) {
  for (const char* text : {"0", "12 furlongs", "", "1TiB", "1073741825"}) {
    Result<uint64_t> bytes = ParseBlockBytes(text);
    ASSERT_FALSE(bytes.ok()) << text;
    EXPECT_EQ(bytes.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(bytes.status().message().find("--block-bytes: '" + std::string(text) + "'"),
              std::string::npos)
        << bytes.status().message();
  }
  EXPECT_NE(ParseBlockBytes("1TiB").status().message().find("1.0 GiB"), std::string::npos);
}

TEST(BlockBytesValidatorTest, RefusesAtParseTime) {
  CLI::App app;
  std::string block_bytes;
  app.add_option("--block-bytes", block_bytes)->check(BlockBytesValidator());
  EXPECT_NO_THROW(app.parse("--block-bytes 2MiB"));
  EXPECT_THROW(app.parse("--block-bytes 1TiB"), CLI::ValidationError);
}

}  // namespace
}  // namespace kvtier::cli
