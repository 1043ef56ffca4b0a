#include "common/resp/protocol.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace kvtier::resp {
namespace {

TEST(ParseInt64Test, AcceptsRedisStyleIntegers) {
  EXPECT_EQ(ParseInt64("0"), 0);
  EXPECT_EQ(ParseInt64("42"), 42);
  EXPECT_EQ(ParseInt64("-1"), -1);
  EXPECT_EQ(ParseInt64("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(ParseInt64("-9223372036854775808"), INT64_MIN);
}

TEST(ParseInt64Test, RejectsEverythingElse) {
  for (const char* text :
       {"", "-", "+1", " 1", "1 ", "01", "-0", "00", "1a", "0x10", "9223372036854775808",
        "-9223372036854775809", "99999999999999999999", "1.5", "\r"}) {
    EXPECT_FALSE(ParseInt64(text).has_value()) << text;
  }
}

TEST(CaseTest, ComparesAndUppercasesAsciiOnly) {
  EXPECT_TRUE(EqualsIgnoreCase("kvt.lookup", "KVT.LOOKUP"));
  EXPECT_FALSE(EqualsIgnoreCase("GET", "GETX"));
  EXPECT_FALSE(EqualsIgnoreCase("GET", "SET"));
  EXPECT_EQ(ToUpperAscii("client setname\xc3\xa9"), "CLIENT SETNAME\xc3\xa9");
  EXPECT_EQ(ToLowerAscii("KVT.Lookup\xc3\x89"), "kvt.lookup\xc3\x89");
}

TEST(DescribeByteTest, EscapesNonPrintableBytes) {
  EXPECT_EQ(DescribeByte('x'), "x");
  EXPECT_EQ(DescribeByte('\x16'), "\\x16");
  EXPECT_EQ(DescribeByte('\xff'), "\\xff");
  EXPECT_EQ(DescribeByte('\r'), "\\x0d");
}

TEST(ReservePayloadTest, MakesRoomForTheNextBytes) {
  std::string payload;
  ReservePayload(payload, 10, 1000);
  EXPECT_GE(payload.capacity(), 10u);
  payload.assign(payload.capacity(), 'x');
  const size_t before = payload.capacity();
  ReservePayload(payload, 1, 1000);
  EXPECT_GE(payload.capacity(), std::min<size_t>(before * 2, 1000));
  payload.assign(900, 'x');
  ReservePayload(payload, 100, 1000);
  EXPECT_GE(payload.capacity(), 1000u);
}

TEST(ReadPayloadCrlfTest, TakesTheCrlfSplitAnywhereAndStopsAtAWrongByte) {
  size_t seen = 0;
  EXPECT_EQ(ReadPayloadCrlf("\r", seen), 1u);
  EXPECT_EQ(seen, 1u);
  EXPECT_EQ(ReadPayloadCrlf("\n*1", seen), 1u);
  EXPECT_EQ(seen, 2u);
  seen = 0;
  EXPECT_EQ(ReadPayloadCrlf("\rx", seen), 1u);  // 'x' is left: the frame is broken
  EXPECT_EQ(seen, 1u);
  seen = 0;
  EXPECT_EQ(ReadPayloadCrlf("\n", seen), 0u);
  EXPECT_EQ(seen, 0u);
}

}  // namespace
}  // namespace kvtier::resp
