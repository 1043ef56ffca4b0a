#include "common/resp/reply_parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "common/resp/reply_writer.h"

namespace kvtier::resp {
namespace {

struct Outcome {
  std::vector<Reply> replies;
  Status status;
};

Outcome FeedChunks(ReplyParser& parser, const std::vector<std::string_view>& chunks) {
  Outcome out;
  for (std::string_view chunk : chunks) {
    while (true) {
      Result<size_t> used = parser.Feed(chunk);
      if (!used.ok()) {
        out.status = used.status();
        return out;
      }
      chunk.remove_prefix(*used);
      if (!parser.has_reply()) break;
      out.replies.push_back(parser.TakeReply());
    }
    EXPECT_TRUE(chunk.empty()) << "the parser stopped early without a reply";
  }
  return out;
}

Outcome Parse(std::string_view bytes, ReplyParser::Options options = {}) {
  ReplyParser parser(options);
  return FeedChunks(parser, {bytes});
}

std::vector<std::string> Debug(const std::vector<Reply>& replies) {
  std::vector<std::string> out;
  for (const Reply& r : replies) out.push_back(r.DebugString());
  return out;
}

struct ValidCase {
  std::string wire;
  std::string debug;
};

const std::vector<ValidCase>& ValidCases() {
  static const auto* cases = new std::vector<ValidCase>{
      {"+OK\r\n", "\"OK\""},
      {"-ERR oops\r\n", "(error) ERR oops"},
      {":-5\r\n", "-5"},
      {"$4\r\na\r\nb\r\n", "\"a\\x0d\\x0ab\""},
      {"$0\r\n\r\n", "\"\""},
      {"$-1\r\n", "nil"},
      {"*-1\r\n", "nil"},
      {"_\r\n", "nil"},
      {"*3\r\n:1\r\n$1\r\na\r\n*0\r\n", "[1, \"a\", []]"},
      {"%2\r\n+k\r\n:1\r\n$1\r\nz\r\n_\r\n", "{\"k\": 1, \"z\": nil}"},
      {"~2\r\n+a\r\n+b\r\n", "~[\"a\", \"b\"]"},
      {">2\r\n+message\r\n+hi\r\n", ">[\"message\", \"hi\"]"},
      {",3.25\r\n", "3.25"},
      {",-inf\r\n", "-inf"},
      {",nan\r\n", "nan"},
      {",+1.5e3\r\n", "+1.5e3"},
      {"#t\r\n", "true"},
      {"#f\r\n", "false"},
      {"(123456789012345678901234567890\r\n", "(big) 123456789012345678901234567890"},
      {"=8\r\ntxt:abcd\r\n", "txt:\"abcd\""},
      {"!8\r\nERR a\r\nb\r\n", "(error) ERR a\r\nb"},
      {"|1\r\n+ttl\r\n:3\r\n+OK\r\n", "\"OK\""},  // attributes are dropped
      {"*2\r\n|1\r\n+a\r\n*1\r\n:1\r\n:7\r\n:8\r\n", "[7, 8]"},
      {"|0\r\n:1\r\n", "1"},
      {"*1\r\n*1\r\n*1\r\n:1\r\n", "[[[1]]]"},
  };
  return *cases;
}

TEST(ReplyParserTest, ParsesValidReplies) {
  for (const ValidCase& c : ValidCases()) {
    Outcome out = Parse(c.wire);
    ASSERT_TRUE(out.status.ok()) << c.wire << ": " << out.status.ToString();
    ASSERT_EQ(out.replies.size(), 1u) << c.wire;
    EXPECT_EQ(out.replies[0].DebugString(), c.debug) << c.wire;
  }
}

// An error message quotes the start of a reply that may be hundreds of MiB: the bounded form
// renders no more than it keeps, and says it cut.
TEST(ReplyParserTest, ABoundedDebugStringCutsWithoutRenderingTheRest) {
  const Reply big = Reply::Aggregate(
      ReplyType::kArray, {Reply::Bulk(std::string(size_t{1} << 20, '\x01')), Reply::Integer(7)});
  const std::string cut = big.DebugString(200);
  EXPECT_EQ(cut.size(), 203u);
  EXPECT_EQ(cut.substr(0, 6), "[\"\\x01");
  EXPECT_EQ(cut.substr(200), "...");
  EXPECT_EQ(Reply::Aggregate(ReplyType::kArray, {Reply::Integer(7)}).DebugString(200),
            "[7]");  // short: whole
}

TEST(ReplyParserTest, DecodesScalarValues) {
  std::vector<Reply> r =
      Parse(",+1.5e3\r\n#t\r\n:-9223372036854775808\r\n,inf\r\n=5\r\nmkd:x\r\n").replies;
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].type, ReplyType::kDouble);
  EXPECT_EQ(r[0].number, 1500.0);
  EXPECT_EQ(r[1].type, ReplyType::kBoolean);
  EXPECT_EQ(r[1].integer, 1);
  EXPECT_EQ(r[2].integer, INT64_MIN);
  EXPECT_TRUE(std::isinf(r[3].number));
  EXPECT_EQ(r[4].format, "mkd");
  EXPECT_EQ(r[4].str, "x");
}

TEST(ReplyParserTest, EverySplitYieldsTheSameReplies) {
  std::string all;
  std::vector<std::string> expected;
  for (const ValidCase& c : ValidCases()) {
    all += c.wire;
    expected.push_back(c.debug);
  }
  const std::string_view view = all;
  for (size_t i = 0; i <= all.size(); ++i) {
    for (size_t j = i; j <= all.size(); j += 3) {
      ReplyParser parser;
      Outcome out = FeedChunks(parser, {view.substr(0, i), view.substr(i, j - i), view.substr(j)});
      ASSERT_TRUE(out.status.ok()) << i << "," << j << ": " << out.status.ToString();
      ASSERT_EQ(Debug(out.replies), expected) << i << "," << j;
      EXPECT_TRUE(parser.idle());
    }
  }
  ReplyParser bytewise;
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < all.size(); ++i) bytes.push_back(view.substr(i, 1));
  EXPECT_EQ(Debug(FeedChunks(bytewise, bytes).replies), expected);
}

TEST(ReplyParserTest, TruncatedRepliesNeedMoreBytesNotAnError) {
  const std::string wire =
      "%2\r\n+k\r\n*2\r\n$3\r\nabc\r\n,1.5\r\n|1\r\n+a\r\n+b\r\n=5\r\ntxt:x\r\n:1\r\n";
  for (size_t i = 1; i < wire.size(); ++i) {
    ReplyParser parser;
    Result<size_t> used = parser.Feed(std::string_view(wire).substr(0, i));
    ASSERT_TRUE(used.ok()) << i << ": " << used.status().ToString();
    EXPECT_EQ(*used, i);
    EXPECT_FALSE(parser.has_reply()) << i;
    EXPECT_FALSE(parser.idle()) << i;
  }
  EXPECT_EQ(Parse(wire).replies.size(), 1u);
}

struct MalformedCase {
  std::string wire;
  std::string message;
};

TEST(ReplyParserTest, RejectsMalformedReplies) {
  const std::vector<MalformedCase> cases = {
      {"?\r\n", "Protocol error: unknown reply type '?'"},
      {"\x16\x03\x01", "Protocol error: unknown reply type '\\x16'"},
      {"GET / HTTP/1.1\r\n", "Protocol error: unknown reply type 'G'"},
      {":abc\r\n", "Protocol error: invalid integer"},
      {":1.5\r\n", "Protocol error: invalid integer"},
      {":\r\n", "Protocol error: invalid integer"},
      {",abc\r\n", "Protocol error: invalid double"},
      {",\r\n", "Protocol error: invalid double"},
      {",1.5x\r\n", "Protocol error: invalid double"},
      {",+-1\r\n", "Protocol error: invalid double"},
      {"#x\r\n", "Protocol error: invalid boolean"},
      {"_x\r\n", "Protocol error: invalid null"},
      {"(12a\r\n", "Protocol error: invalid big number"},
      {"(\r\n", "Protocol error: invalid big number"},
      {"$-2\r\n", "Protocol error: invalid bulk length"},
      {"$?\r\n", "Protocol error: invalid bulk length"},  // streamed strings are not supported
      {"!-1\r\n", "Protocol error: invalid bulk length"},
      {"$536870913\r\n", "Protocol error: invalid bulk length"},
      {"$123456789012345678901\r\n", "Protocol error: invalid bulk length"},
      {"*-2\r\n", "Protocol error: invalid multibulk length"},
      {"%-1\r\n", "Protocol error: invalid multibulk length"},
      {"*?\r\n", "Protocol error: invalid multibulk length"},
      {"*1048577\r\n", "Protocol error: invalid multibulk length"},
      {"%524289\r\n", "Protocol error: invalid multibulk length"},
      {"*2147483647\r\n", "Protocol error: invalid multibulk length"},
      {"=3\r\nabc\r\n", "Protocol error: invalid verbatim string"},
      {"=5\r\ntxtxa\r\n", "Protocol error: invalid verbatim string"},
      {"$3\r\nabcd\r\n", "Protocol error: bulk payload not followed by CRLF"},
      {"$3\r\nabc\n", "Protocol error: bulk payload not followed by CRLF"},
      {"+OK\n", "Protocol error: LF not preceded by CR"},
      {"+OK\rX\r\n", "Protocol error: CR not followed by LF"},
      {"*2\r\n:1\r\n\r\n", "Protocol error: unknown reply type '\\x0d'"},
      {"+" + std::string(64 * 1024 + 1, 'a') + "\r\n", "Protocol error: too big reply line"},
  };
  for (const MalformedCase& c : cases) {
    Outcome out = Parse(c.wire);
    EXPECT_EQ(out.status.code(), StatusCode::kInvalidArgument) << c.wire;
    EXPECT_EQ(out.status.message(), c.message) << c.wire;
    EXPECT_TRUE(out.replies.empty()) << c.wire;
    ReplyParser bytewise;
    std::vector<std::string_view> pieces;
    for (size_t i = 0; i < c.wire.size(); ++i)
      pieces.push_back(std::string_view(c.wire).substr(i, 1));
    EXPECT_EQ(FeedChunks(bytewise, pieces).status, out.status) << c.wire;
  }
}

TEST(ReplyParserTest, GarbageAfterAValidReplyFailsAfterTheReply) {
  ReplyParser parser;
  const std::string wire("*1\r\n:1\r\n\0garbage", 15);
  Outcome out = FeedChunks(parser, {wire});
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(out.status.message(), "Protocol error: unknown reply type '\\x00'");
  EXPECT_EQ(parser.consumed_bytes(), 8u);
  EXPECT_TRUE(parser.failed());
  EXPECT_FALSE(parser.Feed("+OK\r\n").ok());
}

TEST(ReplyParserTest, NestingIsBounded) {
  ReplyParser::Options options;
  options.max_depth = 4;
  EXPECT_TRUE(Parse("*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", options).status.ok());
  EXPECT_EQ(Parse("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", options).status.message(),
            "Protocol error: reply nested too deeply");
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "*1\r\n";
  EXPECT_EQ(Parse(deep).status.message(), "Protocol error: reply nested too deeply");
}

TEST(ReplyParserTest, HugeHeadersAllocateNothing) {
  ReplyParser::Options options;
  options.max_aggregate_len = size_t{1} << 32;
  options.max_bulk_bytes = size_t{4} << 30;
  options.max_reply_bytes = size_t{1} << 40;
  ReplyParser parser(options);
  ASSERT_TRUE(parser.Feed("*2147483647\r\n%2147483647\r\n$4000000000\r\nabcd").ok());
  EXPECT_LT(parser.buffered_capacity_bytes(), 4096u);
  const std::string mib(1 << 20, 'x');
  ASSERT_TRUE(parser.Feed(mib).ok());
  EXPECT_LT(parser.buffered_capacity_bytes(), size_t{3} << 20);
}

// A caller that reads the rest of a large value from its socket into the value itself
// (NodeConnection), mixing in-place reads of any size with bytes fed through Feed.
TEST(ReplyParserTest, ABulkValueReadPartlyInPlaceIsTheSameValue) {
  std::string payload(100'000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>('a' + i % 26);
  const std::string wire = "$" + std::to_string(payload.size()) + "\r\n" + payload + "\r\n:7\r\n";
  for (const size_t room : {size_t{1}, size_t{4096}, size_t{65536}, size_t{1} << 20}) {
    ReplyParser parser;
    EXPECT_EQ(parser.bulk_bytes_left(), 0u);
    EXPECT_TRUE(parser.BeginInPlace(room).empty()) << "no value under way: no room";
    std::string_view rest = wire;
    // The header and 10 payload bytes through Feed.
    ASSERT_EQ(*parser.Feed(rest.substr(0, 20)), 20u);
    rest.remove_prefix(20);
    std::vector<Reply> replies;
    bool through_feed = false;
    while (!rest.empty()) {
      if (parser.bulk_bytes_left() > 0) {
        // Alternately: part of the room filled in place (the rest of it left for later), or a
        // chunk through Feed, which lands in the room an earlier call made.
        if (!through_feed) {
          const std::span<char> space = parser.BeginInPlace(room);
          ASSERT_FALSE(space.empty());
          ASSERT_LE(space.size(), parser.bulk_bytes_left());
          const size_t n = std::min({space.size(), rest.size(), size_t{7'000}});
          std::memcpy(space.data(), rest.data(), n);
          parser.CommitInPlace(n);
          rest.remove_prefix(n);
          through_feed = true;
          continue;
        }
        through_feed = false;
      }
      const Result<size_t> used = parser.Feed(rest.substr(0, std::min<size_t>(rest.size(), 3'000)));
      ASSERT_TRUE(used.ok()) << used.status().ToString();
      rest.remove_prefix(*used);
      if (parser.has_reply()) replies.push_back(parser.TakeReply());
    }
    ASSERT_EQ(replies.size(), 2u) << "room " << room;
    EXPECT_EQ(replies[0].type, ReplyType::kBulkString);
    EXPECT_EQ(replies[0].str, payload) << "room " << room;
    EXPECT_EQ(replies[1], Reply::Integer(7));
    EXPECT_EQ(parser.consumed_bytes(), wire.size());
  }
}

TEST(ReplyParserTest, AnInPlaceCommitCountsNoByteBeyondItsRoom) {
  ReplyParser parser;
  ASSERT_EQ(*parser.Feed("$10\r\nab"), 7u);
  EXPECT_EQ(parser.bulk_bytes_left(), 8u);
  parser.CommitInPlace(5);  // no room was made: nothing is counted
  EXPECT_EQ(parser.bulk_bytes_left(), 8u);
  const std::span<char> room = parser.BeginInPlace(3);
  ASSERT_EQ(room.size(), 3u);
  std::memcpy(room.data(), "cde", 3);
  parser.CommitInPlace(100);  // more than the room: only the room's bytes count
  EXPECT_EQ(parser.bulk_bytes_left(), 5u);
  ASSERT_EQ(*parser.Feed("fghij\r\n"), 7u);
  ASSERT_TRUE(parser.has_reply());
  EXPECT_EQ(parser.TakeReply().str, "abcdefghij");
}

TEST(ReplyParserTest, OversizedRepliesAreRefusedAtTheHeader) {
  ReplyParser::Options options;
  options.max_reply_bytes = 90;
  EXPECT_EQ(Parse("$200\r\n", options).status.message(), "Protocol error: too big reply");
  EXPECT_EQ(Parse("*3\r\n$40\r\n" + std::string(40, 'a') + "\r\n$40\r\n", options).status.message(),
            "Protocol error: too big reply");
  options.max_bulk_bytes = 10;
  EXPECT_EQ(Parse("$11\r\n", options).status.message(), "Protocol error: invalid bulk length");
}

// Writes one reply of every kind; `payload` travels after a bare bulk header.
std::string WriteEveryKind(Protocol protocol) {
  std::string out;
  ReplyWriter w(&out, protocol);
  w.AppendSimpleString("OK");
  w.AppendError(NotFound("x"));
  w.AppendInteger(-7);
  w.AppendBulk("a\r\nb");
  w.AppendNull();
  w.AppendNullArray();
  w.AppendArrayHeader(2);
  w.AppendInteger(1);
  w.AppendBulk("a");
  w.AppendMapHeader(1);
  w.AppendBulk("k");
  w.AppendDouble(2.5);
  w.AppendSetHeader(1);
  w.AppendBulk("x");
  w.AppendPushHeader(2);
  w.AppendBulk("message");
  w.AppendBulk("m");
  w.AppendDouble(3.25);
  w.AppendDouble(-INFINITY);
  w.AppendBoolean(true);
  w.AppendBoolean(false);
  w.AppendBigNumber("12345678901234567890");
  w.AppendVerbatim("hello");
  w.AppendArrayHeader(0);
  w.AppendArrayHeader(2);
  w.AppendArrayHeader(1);
  w.AppendInteger(1);
  w.AppendMapHeader(0);
  w.AppendBulkHeader(7);
  out += "payload";
  out += kCrlf;
  return out;
}

TEST(ReplyParserTest, RoundTripsEveryKindInResp3) {
  Outcome out = Parse(WriteEveryKind(Protocol::kResp3));
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(
      Debug(out.replies),
      (std::vector<std::string>{
          "\"OK\"", "(error) NOTFOUND x", "-7", "\"a\\x0d\\x0ab\"", "nil", "nil", "[1, \"a\"]",
          "{\"k\": 2.5}", "~[\"x\"]", ">[\"message\", \"m\"]", "3.25", "-inf", "true", "false",
          "(big) 12345678901234567890", "txt:\"hello\"", "[]", "[[1], {}]", "\"payload\""}));
  EXPECT_EQ(out.replies[2].type, ReplyType::kInteger);
  EXPECT_EQ(out.replies[10].number, 3.25);
  EXPECT_EQ(out.replies[11].number, -INFINITY);
  EXPECT_EQ(out.replies[12].integer, 1);
  EXPECT_EQ(out.replies[14].type, ReplyType::kBigNumber);
}

TEST(ReplyParserTest, RoundTripsEveryKindInResp2) {
  Outcome out = Parse(WriteEveryKind(Protocol::kResp2));
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(
      Debug(out.replies),
      (std::vector<std::string>{
          "\"OK\"", "(error) NOTFOUND x", "-7", "\"a\\x0d\\x0ab\"", "nil", "nil", "[1, \"a\"]",
          "[\"k\", \"2.5\"]", "[\"x\"]", "[\"message\", \"m\"]", "\"3.25\"", "\"-inf\"", "1", "0",
          "\"12345678901234567890\"", "\"hello\"", "[]", "[[1], []]", "\"payload\""}));
  // Everything RESP2 can say decodes to the plain RESP2 types.
  for (const Reply& r : out.replies) {
    EXPECT_TRUE(r.type == ReplyType::kSimpleString || r.type == ReplyType::kError ||
                r.type == ReplyType::kInteger || r.type == ReplyType::kBulkString ||
                r.type == ReplyType::kNull || r.type == ReplyType::kArray)
        << r.DebugString();
  }
}

TEST(ReplyParserTest, BuildersMatchParsedReplies) {
  Outcome out = Parse("*4\r\n+OK\r\n-ERR x\r\n:3\r\n$-1\r\n");
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(out.replies[0],
            Reply::Aggregate(ReplyType::kArray, {Reply::Simple("OK"), Reply::Error("ERR x"),
                                                 Reply::Integer(3), Reply::Null()}));
  EXPECT_NE(out.replies[0], Reply::Bulk("OK"));
}

}  // namespace
}  // namespace kvtier::resp
