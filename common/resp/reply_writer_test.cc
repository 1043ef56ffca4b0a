#include "common/resp/reply_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace kvtier::resp {
namespace {

// Writes with `write` in both dialects and returns {RESP2 bytes, RESP3 bytes}.
template <typename Fn>
std::pair<std::string, std::string> Both(Fn write) {
  std::string resp2;
  std::string resp3;
  ReplyWriter w2(&resp2, Protocol::kResp2);
  ReplyWriter w3(&resp3, Protocol::kResp3);
  write(w2);
  write(w3);
  return {resp2, resp3};
}

using Pair = std::pair<std::string, std::string>;

TEST(ReplyWriterTest, ScalarsInBothDialects) {
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendSimpleString("OK"); }), Pair("+OK\r\n", "+OK\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendError("ERR unknown command"); }),
            Pair("-ERR unknown command\r\n", "-ERR unknown command\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendInteger(-42); }), Pair(":-42\r\n", ":-42\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendInteger(INT64_MIN); }).first,
            ":-9223372036854775808\r\n");
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendBulk(std::string("a\r\n\0", 4)); }),
            Pair(std::string("$4\r\na\r\n\0\r\n", 10), std::string("$4\r\na\r\n\0\r\n", 10)));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendBulk(""); }), Pair("$0\r\n\r\n", "$0\r\n\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendNull(); }), Pair("$-1\r\n", "_\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendNullArray(); }), Pair("*-1\r\n", "_\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendBoolean(true); }), Pair(":1\r\n", "#t\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendBoolean(false); }), Pair(":0\r\n", "#f\r\n"));
  EXPECT_EQ(
      Both([](ReplyWriter& w) { w.AppendBigNumber("-123456789012345678901234567890"); }),
      Pair("$31\r\n-123456789012345678901234567890\r\n", "(-123456789012345678901234567890\r\n"));
  EXPECT_EQ(
      Both([](ReplyWriter& w) { w.AppendVerbatim("# Server\r\nversion:1\r\n"); }),
      Pair("$21\r\n# Server\r\nversion:1\r\n\r\n", "=25\r\ntxt:# Server\r\nversion:1\r\n\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendVerbatim("*x*", "mkd"); }).second,
            "=7\r\nmkd:*x*\r\n");
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendVerbatim("x", "bad:"); }).second, "=5\r\ntxt:x\r\n");
}

TEST(ReplyWriterTest, Doubles) {
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendDouble(3.25); }),
            Pair("$4\r\n3.25\r\n", ",3.25\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendDouble(0.1); }).second, ",0.1\r\n");
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendDouble(1e300); }).second, ",1e+300\r\n");
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendDouble(INFINITY); }),
            Pair("$3\r\ninf\r\n", ",inf\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendDouble(-INFINITY); }).second, ",-inf\r\n");
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendDouble(-std::nan("")); }).second, ",nan\r\n");
}

TEST(ReplyWriterTest, Aggregates) {
  auto map = Both([](ReplyWriter& w) {
    w.AppendMapHeader(2);
    w.AppendBulk("hits");
    w.AppendInteger(7);
    w.AppendBulk("ratio");
    w.AppendDouble(0.5);
  });
  EXPECT_EQ(map.first, "*4\r\n$4\r\nhits\r\n:7\r\n$5\r\nratio\r\n$3\r\n0.5\r\n");
  EXPECT_EQ(map.second, "%2\r\n$4\r\nhits\r\n:7\r\n$5\r\nratio\r\n,0.5\r\n");
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendArrayHeader(0); }), Pair("*0\r\n", "*0\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendSetHeader(3); }), Pair("*3\r\n", "~3\r\n"));
  EXPECT_EQ(Both([](ReplyWriter& w) { w.AppendPushHeader(2); }), Pair("*2\r\n", ">2\r\n"));
}

TEST(ReplyWriterTest, SimpleLinesCannotBreakFraming) {
  std::string out;
  ReplyWriter w(&out);
  w.AppendError("ERR bad key 'a\r\n+OK'");
  w.AppendSimpleString("two\nlines");
  EXPECT_EQ(out, "-ERR bad key 'a  +OK'\r\n+two lines\r\n");
}

TEST(ReplyWriterTest, StatusErrorsCarryTheProtocolsStatusWord) {
  std::string out;
  ReplyWriter w(&out);
  w.AppendError(NotFound("no such namespace"));
  w.AppendError(InvalidArgument("wrong number of arguments for 'get' command"));
  w.AppendError(Busy("host tier is full"));
  w.AppendError(PermissionDenied("AUTH required"));
  EXPECT_EQ(out,
            "-NOTFOUND no such namespace\r\n"
            "-INVALID wrong number of arguments for 'get' command\r\n"
            "-BUSY host tier is full\r\n"
            "-NOPERM AUTH required\r\n");
  out.clear();
  w.AppendError(ChecksumMismatch("block 3"));
  EXPECT_EQ(out, "-DEVICE block 3\r\n");
}

TEST(ReplyWriterTest, BulkHeaderLetsThePayloadTravelSeparately) {
  std::string out = "prefix";
  ReplyWriter w(&out, Protocol::kResp3);
  w.AppendBulkHeader(67108864);
  EXPECT_EQ(out, "prefix$67108864\r\n");
  w.set_protocol(Protocol::kResp2);
  EXPECT_EQ(w.protocol(), Protocol::kResp2);
  EXPECT_EQ(w.buffer(), &out);
}

}  // namespace
}  // namespace kvtier::resp
