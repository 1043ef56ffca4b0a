#include "common/resp/request_parser.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace kvtier::resp {
namespace {

using Args = std::vector<std::string>;
using std::string_literals::operator""s;

struct Outcome {
  std::vector<Args> commands;
  Status status;
};

// Feeds `chunks` in order and takes every command that completes.
Outcome FeedChunks(RequestParser& parser, const std::vector<std::string_view>& chunks) {
  Outcome out;
  for (std::string_view chunk : chunks) {
    while (true) {
      Result<size_t> used = parser.Feed(chunk);
      if (!used.ok()) {
        out.status = used.status();
        return out;
      }
      chunk.remove_prefix(*used);
      if (!parser.has_command()) break;
      out.commands.push_back(parser.TakeCommand().args);
    }
    EXPECT_TRUE(chunk.empty()) << "the parser stopped early without a command";
  }
  return out;
}

Outcome Parse(std::string_view bytes, RequestParser::Options options = {}) {
  RequestParser parser(options);
  return FeedChunks(parser, {bytes});
}

Outcome ParseBytewise(std::string_view bytes, RequestParser::Options options = {}) {
  RequestParser parser(options);
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < bytes.size(); ++i) pieces.push_back(bytes.substr(i, 1));
  return FeedChunks(parser, pieces);
}

struct ValidCase {
  std::string wire;
  std::vector<Args> commands;
};

TEST(RequestParserTest, ParsesValidFrames) {
  const std::vector<ValidCase> cases = {
      {"*1\r\n$4\r\nPING\r\n", {{"PING"}}},
      {"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n", {{"SET", "k", "hello"}}},
      {"*2\r\n$3\r\nGET\r\n$4\r\na\r\nb\r\n", {{"GET", "a\r\nb"}}},  // binary safe
      {"*2\r\n$3\r\nGET\r\n$0\r\n\r\n", {{"GET", ""}}},
      {"*2\r\n$3\r\nSET\r\n$3\r\n\0\xff\x16\r\n"s, {{"SET", "\0\xff\x16"s}}},
      {"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", {{"PING"}}},  // empty arrays are skipped
      {"PING\r\n", {{"PING"}}},
      {"PING\n", {{"PING"}}},
      {"  set\tk  v \r\n", {{"set", "k", "v"}}},
      {"\r\n\n   \r\nPING\r\n", {{"PING"}}},  // empty inline lines are skipped
      {"GET cl\xc3\xa9\r\n", {{"GET", "cl\xc3\xa9"}}},
      {"GET / HTTP/1.1\r\n", {{"GET", "/", "HTTP/1.1"}}},  // refused later, by arity or AUTH
      {"$5\r\nhello\r\n", {{"$5"}, {"hello"}}},            // as in Redis: not '*', so inline
      {"PING\r\n*1\r\n$4\r\nPING\r\nECHO x\r\n", {{"PING"}, {"PING"}, {"ECHO", "x"}}},
  };
  for (const ValidCase& c : cases) {
    Outcome out = Parse(c.wire);
    EXPECT_TRUE(out.status.ok()) << c.wire << ": " << out.status.ToString();
    EXPECT_EQ(out.commands, c.commands) << c.wire;
  }
}

TEST(RequestParserTest, NameIsCaseInsensitive) {
  Outcome out = Parse("*2\r\n$10\r\nkVt.LookUp\r\n$1\r\nx\r\n");
  ASSERT_EQ(out.commands.size(), 1u);
  Command cmd{out.commands[0]};
  EXPECT_EQ(cmd.name(), "kVt.LookUp");
  EXPECT_TRUE(cmd.NameIs("KVT.LOOKUP"));
  EXPECT_TRUE(cmd.NameIs("kvt.lookup"));
  EXPECT_FALSE(cmd.NameIs("KVT.LOOKUPX"));
  EXPECT_EQ(cmd.UpperName(), "KVT.LOOKUP");
  EXPECT_EQ(Command{}.name(), "");
}

const std::string kPipeline =
    "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$10\r\nab\r\ncd\r\nef\r\n"
    "PING\r\n"
    "*2\r\n$3\r\nGET\r\n$0\r\n\r\n"
    "*0\r\n"
    "  ECHO  hi \n"
    "*1\r\n$4\r\nQUIT\r\n";
const std::vector<Args> kPipelineCommands = {
    {"SET", "key", "ab\r\ncd\r\nef"}, {"PING"}, {"GET", ""}, {"ECHO", "hi"}, {"QUIT"}};

TEST(RequestParserTest, EverySplitOfAPipelineYieldsTheSameCommands) {
  for (size_t i = 0; i <= kPipeline.size(); ++i) {
    for (size_t j = i; j <= kPipeline.size(); ++j) {
      RequestParser parser;
      std::string_view all = kPipeline;
      Outcome out = FeedChunks(parser, {all.substr(0, i), all.substr(i, j - i), all.substr(j)});
      ASSERT_TRUE(out.status.ok()) << i << "," << j << ": " << out.status.ToString();
      ASSERT_EQ(out.commands, kPipelineCommands) << i << "," << j;
      EXPECT_TRUE(parser.idle());
    }
  }
}

TEST(RequestParserTest, OneByteAtATime) {
  RequestParser parser;
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < kPipeline.size(); ++i)
    bytes.push_back(std::string_view(kPipeline).substr(i, 1));
  Outcome out = FeedChunks(parser, bytes);
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(out.commands, kPipelineCommands);
  EXPECT_EQ(parser.consumed_bytes(), kPipeline.size());
}

TEST(RequestParserTest, TruncatedFramesNeedMoreBytesNotAnError) {
  const std::string frame = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n";
  for (size_t i = 1; i < frame.size(); ++i) {
    RequestParser parser;
    Result<size_t> used = parser.Feed(std::string_view(frame).substr(0, i));
    ASSERT_TRUE(used.ok()) << i << ": " << used.status().ToString();
    EXPECT_EQ(*used, i);
    EXPECT_FALSE(parser.has_command()) << i;
    EXPECT_FALSE(parser.idle()) << i;
  }
}

TEST(RequestParserTest, StopsAfterEachCommandUntilItIsTaken) {
  RequestParser parser;
  const std::string two = "PING\r\nPING\r\n";
  Result<size_t> used = parser.Feed(two);
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(*used, 6u);
  ASSERT_TRUE(parser.has_command());
  EXPECT_EQ(*parser.Feed(std::string_view(two).substr(6)), 0u);  // not taken yet
  EXPECT_EQ(parser.TakeCommand().args, Args{"PING"});
  EXPECT_EQ(*parser.Feed(std::string_view(two).substr(6)), 6u);
  EXPECT_TRUE(parser.has_command());
}

struct MalformedCase {
  std::string wire;
  std::string message;
};

TEST(RequestParserTest, RejectsMalformedFrames) {
  const std::string too_long_inline(64 * 1024 + 1, 'a');
  const std::vector<MalformedCase> cases = {
      {"*-2\r\n", "Protocol error: invalid multibulk length"},
      {"*abc\r\n", "Protocol error: invalid multibulk length"},
      {"*01\r\n", "Protocol error: invalid multibulk length"},
      {"*1048577\r\n", "Protocol error: invalid multibulk length"},
      {"*2147483647\r\n", "Protocol error: invalid multibulk length"},
      {"*99999999999999999999\r\n", "Protocol error: invalid multibulk length"},
      {"*1\r\r", "Protocol error: invalid multibulk length"},
      {"*1\n$4\r\nPING\r\n", "Protocol error: invalid multibulk length"},
      {"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"},
      {"*1\r\n$x\r\n", "Protocol error: invalid bulk length"},
      {"*1\r\n$\r\n", "Protocol error: invalid bulk length"},
      {"*1\r\n$536870913\r\n", "Protocol error: invalid bulk length"},  // 512 MiB + 1
      {"*1\r\n$1000000000000000000000000\r\n", "Protocol error: invalid bulk length"},
      {"*1\r\n$3\nGET\r\n", "Protocol error: invalid bulk length"},
      {"*1\r\nGET\r\n", "Protocol error: expected '$', got 'G'"},
      {"*1\r\n:1\r\n", "Protocol error: expected '$', got ':'"},
      {"*2\r\n$3\r\nGET\r\n\x01", "Protocol error: expected '$', got '\\x01'"},
      {"*1\r\n$3\r\nGETX\r\n", "Protocol error: bulk payload not followed by CRLF"},
      {"*1\r\n$3\r\nGET\n\n", "Protocol error: bulk payload not followed by CRLF"},
      {"*1\r\n$3\r\nGET\r\r", "Protocol error: bulk payload not followed by CRLF"},
      // A declared length too long for its payload swallows the next header.
      {"*2\r\n$5\r\nGET\r\n$1\r\nk\r\n", "Protocol error: bulk payload not followed by CRLF"},
      {too_long_inline, "Protocol error: too big inline request"},
      {"PING\rX\r\n", "Protocol error: CR not followed by LF in inline request"},
      {"PI\0NG\r\n"s, "Protocol error: invalid byte '\\x00' in inline request"},
      {"PING\x7f\r\n", "Protocol error: invalid byte '\\x7f' in inline request"},
      // A TLS ClientHello sent to the plain-text port: refused at its first byte.
      {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "Protocol error: invalid byte '\\x16'"},
  };
  for (const MalformedCase& c : cases) {
    Outcome out = Parse(c.wire);
    EXPECT_EQ(out.status.code(), StatusCode::kInvalidArgument) << c.wire;
    EXPECT_EQ(out.status.message().rfind(c.message, 0), 0u)
        << c.wire << " gave: " << out.status.message();
    EXPECT_TRUE(out.commands.empty()) << c.wire;
    EXPECT_EQ(ParseBytewise(c.wire).status, out.status) << c.wire;
  }
}

// Found by resp_fuzz: the inline limit and the command limit were checked in turn on each run of
// bytes, so which error a long line got depended on how it was split into reads.
TEST(RequestParserTest, InlineLimitErrorDoesNotDependOnTheSplit) {
  RequestParser::Options options;
  options.max_inline_bytes = 10;
  options.max_command_bytes = 5;
  const std::string line = "}}}}}}}}}}}} HTT\x01";
  EXPECT_EQ(Parse(line, options).status.message(), "Protocol error: too big inline request");
  EXPECT_EQ(ParseBytewise(line, options).status.message(),
            "Protocol error: too big inline request");
  EXPECT_EQ(Parse("ECHO\r\n", options).commands, std::vector<Args>{{"ECHO"}});
}

TEST(RequestParserTest, GarbageAfterAValidFrameFailsAfterTheFrame) {
  RequestParser parser;
  const std::string wire = "*1\r\n$4\r\nPING\r\n\x16\x03\x01";
  Outcome out = FeedChunks(parser, {wire});
  EXPECT_EQ(out.commands, std::vector<Args>{{"PING"}});
  EXPECT_EQ(out.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parser.consumed_bytes(), 14u);  // the error is at the first byte after the frame
}

TEST(RequestParserTest, ErrorsAreFinal) {
  RequestParser parser;
  Result<size_t> first = parser.Feed("*1\r\n$-5\r\n");
  ASSERT_FALSE(first.ok());
  EXPECT_TRUE(parser.failed());
  Result<size_t> again = parser.Feed("PING\r\n");
  EXPECT_EQ(again.status(), first.status());
  EXPECT_FALSE(parser.has_command());
}

TEST(RequestParserTest, HugeArrayHeaderAllocatesNothing) {
  RequestParser::Options options;
  options.max_array_len = size_t{1} << 31;
  options.max_command_bytes = size_t{1} << 40;
  RequestParser parser(options);
  Result<size_t> used = parser.Feed("*2147483647\r\n");
  ASSERT_TRUE(used.ok()) << used.status().ToString();
  EXPECT_LT(parser.buffered_capacity_bytes(), 4096u);
  ASSERT_TRUE(parser.Feed("$3\r\nGET\r\n$3\r\nkey\r\n").ok());
  EXPECT_LT(parser.buffered_capacity_bytes(), 4096u);
}

TEST(RequestParserTest, HugeArrayHeaderIsRefusedByCommandSize) {
  RequestParser::Options options;
  options.max_array_len = size_t{1} << 31;  // only the command size limit stands in the way
  Outcome out = Parse("*2147483647\r\n", options);
  EXPECT_EQ(out.status.message(), "Protocol error: too big command");
}

TEST(RequestParserTest, HugeBulkHeaderReservesOnlyWhatArrived) {
  RequestParser::Options options;
  options.max_bulk_bytes = size_t{4} << 30;
  options.max_command_bytes = size_t{8} << 30;
  RequestParser parser(options);
  ASSERT_TRUE(parser.Feed("*2\r\n$3\r\nSET\r\n$4000000000\r\nabcdefgh").ok());
  EXPECT_LT(parser.buffered_capacity_bytes(), 4096u);
  EXPECT_EQ(parser.pending_bulk_bytes(), 4000000000u - 8);
  const std::string mib(1 << 20, 'x');
  ASSERT_TRUE(parser.Feed(mib).ok());
  EXPECT_LT(parser.buffered_capacity_bytes(), size_t{3} << 20);
}

TEST(RequestParserTest, OversizedFramesAreRefusedAtTheHeader) {
  RequestParser::Options options;
  options.max_bulk_bytes = 1000;
  options.max_command_bytes = 100;
  // The payload has not arrived: the header alone decides.
  EXPECT_EQ(Parse("*2\r\n$3\r\nSET\r\n$1001\r\n", options).status.message(),
            "Protocol error: invalid bulk length");
  EXPECT_EQ(Parse("*2\r\n$3\r\nSET\r\n$200\r\n", options).status.message(),
            "Protocol error: too big command");
  EXPECT_EQ(Parse("*17\r\n", options).status.message(), "Protocol error: too big command");
  // Many small arguments add up too.
  std::string many = "*16\r\n";
  for (int i = 0; i < 16; ++i) many += "$4\r\nabcd\r\n";
  EXPECT_EQ(Parse(many, options).status.message(), "Protocol error: too big command");
  options.max_inline_bytes = 8;
  EXPECT_EQ(Parse("PING 123\r\n", options).commands, (std::vector<Args>{{"PING", "123"}}));
  EXPECT_EQ(Parse("PING 1234\r\n", options).status.message(),
            "Protocol error: too big inline request");
}

TEST(RequestParserTest, BigPayloadIsCopiedOnceWithoutOverAllocation) {
  const size_t size = 8 << 20;
  const std::string header = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + std::to_string(size) + "\r\n";
  const std::string payload(size, 'v');
  for (size_t piece : {size_t{64} << 10, size}) {
    RequestParser parser;
    ASSERT_TRUE(parser.Feed(header).ok());
    for (size_t at = 0; at < size; at += piece) {
      ASSERT_TRUE(parser.Feed(std::string_view(payload).substr(at, piece)).ok());
    }
    ASSERT_TRUE(parser.Feed("\r\n").ok());
    ASSERT_TRUE(parser.has_command());
    Command cmd = parser.TakeCommand();
    EXPECT_EQ(cmd.args[2].size(), size);
    EXPECT_EQ(cmd.args[2].capacity(), size) << "piece " << piece;  // never past the declared length
  }
}

TEST(RequestParserTest, BulkWindowReceivesThePayloadInPlace) {
  RequestParser parser;
  ASSERT_TRUE(parser.Feed("*2\r\n$3\r\nPUT\r\n$10\r\n0123").ok());
  ASSERT_EQ(parser.pending_bulk_bytes(), 6u);
  std::span<char> window = parser.BulkWindow(4);
  ASSERT_EQ(window.size(), 4u);
  std::memcpy(window.data(), "45", 2);
  parser.CommitBulk(2);  // a short read
  EXPECT_EQ(parser.pending_bulk_bytes(), 4u);
  window = parser.BulkWindow(100);
  ASSERT_EQ(window.size(), 4u);  // never past the declared length
  std::memcpy(window.data(), "6789", 4);
  parser.CommitBulk(4);
  EXPECT_EQ(parser.pending_bulk_bytes(), 0u);
  EXPECT_TRUE(parser.BulkWindow(10).empty());  // the CRLF goes through Feed
  ASSERT_TRUE(parser.Feed("\r\n").ok());
  ASSERT_TRUE(parser.has_command());
  EXPECT_EQ(parser.TakeCommand().args, (Args{"PUT", "0123456789"}));
  EXPECT_EQ(parser.consumed_bytes(), 30u);
}

TEST(RequestParserTest, DivertedPayloadLandsInTheSinkWhateverPathItTakes) {
  RequestParser parser;
  ASSERT_TRUE(parser.Feed("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$12\r\nab").ok());
  ASSERT_EQ(parser.pending_bulk_bytes(), 10u);
  EXPECT_EQ(parser.bulk_declared_bytes(), 12u);
  EXPECT_EQ(parser.elements_left(), 0u);
  ASSERT_EQ(parser.partial_args().size(), 3u);
  EXPECT_EQ(parser.partial_args()[0], "SET");
  std::string sink(12, '.');
  parser.DivertBulk(std::span<char>(sink.data(), sink.size()));
  EXPECT_EQ(sink, "ab..........");                // what had arrived moved over
  ASSERT_TRUE(parser.Feed("cd").ok());            // through Feed
  std::span<char> window = parser.BulkWindow(5);  // and through a window
  ASSERT_EQ(window.data(), sink.data() + 4);
  std::memcpy(window.data(), "efg", 3);
  parser.CommitBulk(3);
  ASSERT_TRUE(parser.Feed("hijkl\r\n").ok());
  ASSERT_TRUE(parser.has_command());
  EXPECT_EQ(sink, "abcdefghijkl");
  Command cmd = parser.TakeCommand();
  EXPECT_EQ(cmd.args, (Args{"SET", "k", ""}));
  EXPECT_EQ(cmd.diverted_arg, 2);
  // The next command is an ordinary one again.
  ASSERT_TRUE(parser.Feed("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").ok());
  cmd = parser.TakeCommand();
  EXPECT_EQ(cmd.args, (Args{"GET", "k"}));
  EXPECT_EQ(cmd.diverted_arg, -1);
  EXPECT_EQ(sink, "abcdefghijkl");
}

TEST(RequestParserTest, DivertBulkOutsideAPayloadOrWithAWrongSizeDoesNothing) {
  RequestParser parser;
  std::string sink(4, '.');
  parser.DivertBulk(std::span<char>(sink.data(), sink.size()));
  ASSERT_TRUE(parser.Feed("*1\r\n$5\r\nab").ok());
  parser.DivertBulk(std::span<char>(sink.data(), sink.size()));  // 4 != 5
  ASSERT_TRUE(parser.Feed("cde\r\n").ok());
  Command cmd = parser.TakeCommand();
  EXPECT_EQ(cmd.args, Args{"abcde"});
  EXPECT_EQ(cmd.diverted_arg, -1);
  EXPECT_EQ(sink, "....");
}

TEST(RequestParserTest, UncommittedWindowIsDiscardedByFeed) {
  RequestParser parser;
  ASSERT_TRUE(parser.Feed("*1\r\n$4\r\nab").ok());
  std::span<char> window = parser.BulkWindow(2);
  ASSERT_EQ(window.size(), 2u);
  window[0] = 'X';
  ASSERT_TRUE(parser.Feed("cd\r\n").ok());
  ASSERT_TRUE(parser.has_command());
  EXPECT_EQ(parser.TakeCommand().args, Args{"abcd"});
}

}  // namespace
}  // namespace kvtier::resp
