#include "common/resp/status_words.h"

#include <gtest/gtest.h>

namespace kvtier::resp {
namespace {

TEST(StatusWordsTest, EveryCodeReadsBackFromItsWord) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    const auto code = static_cast<StatusCode>(c);
    bool known = false;
    const StatusCode back = StatusCodeFromWord(StatusWord(code), &known);
    EXPECT_TRUE(known) << StatusWord(code);
    // Checksum and corruption errors travel as DEVICE: the reader learns the bytes are unservable.
    if (code == StatusCode::kChecksumMismatch || code == StatusCode::kCorruption) {
      EXPECT_EQ(back, StatusCode::kDeviceError);
    } else {
      EXPECT_EQ(back, code) << StatusWord(code);
    }
  }
}

TEST(StatusWordsTest, RedisWordsAndStatusNamesAreUnderstood) {
  EXPECT_EQ(StatusCodeFromWord("ERR"), StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusCodeFromWord("noauth"), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusCodeFromWord("WRONGPASS"), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusCodeFromWord("CHECKSUM_MISMATCH"), StatusCode::kChecksumMismatch);
  bool known = true;
  EXPECT_EQ(StatusCodeFromWord("MAYBE", &known), StatusCode::kInternal);
  EXPECT_FALSE(known);
}

}  // namespace
}  // namespace kvtier::resp
