#include "daemon/cli/trace_reader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <span>
#include <string>
#include <utility>

namespace kvtier::cli {
namespace {

// Writes `text` to a fresh file under the test's temporary directory and returns its path.
std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

// Each line must be rejected as kInvalidArgument with exactly its message.
void ExpectRejected(std::span<const std::pair<const char*, const char*>> cases) {
  for (const auto& [line, message] : cases) {
    auto request = ParseTraceLine(line);
    ASSERT_FALSE(request.ok()) << line;
    EXPECT_EQ(request.status().code(), StatusCode::kInvalidArgument) << line;
    EXPECT_EQ(request.status().message(), message) << line;
  }
}

TEST(ParseTraceLineTest, ParsesAllFields) {
  auto request = ParseTraceLine(
      R"({"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]})");
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ(request->timestamp_ms, 27482u);
  EXPECT_EQ(request->input_tokens, 6955u);
  EXPECT_EQ(request->output_tokens, 52u);
  EXPECT_EQ(request->hash_ids, (std::vector<uint64_t>{46, 47}));
}

TEST(ParseTraceLineTest, IgnoresUnknownFieldsAndAcceptsAnEmptyPrompt) {
  auto request = ParseTraceLine(
      R"({"hash_ids": [], "timestamp": 0, "input_length": 0, "output_length": 1, "x": "y"})");
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_TRUE(request->hash_ids.empty());
}

TEST(ParseTraceLineTest, NamesWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"timestamp": 0, "input_length": 1, "output_length": 1})", "missing \"hash_ids\""},
      {R"({"input_length": 1, "output_length": 1, "hash_ids": []})", "missing \"timestamp\""},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": []})", "missing \"input_length\""},
      {R"({"timestamp": 0, "input_length": 1, "hash_ids": []})", "missing \"output_length\""},
      {R"({"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": []})",
       "\"timestamp\" is not a non-negative integer"},
      {R"({"timestamp": 0, "input_length": 1.5, "output_length": 1, "hash_ids": []})",
       "\"input_length\" is not a non-negative integer"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": 3})",
       "\"hash_ids\" is not an array"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1, "2"]})",
       "\"hash_ids\"[1] is not a non-negative integer"},
      {R"({"timestamp": 0, "input_length": 1,)", "not valid JSON"},
      {R"([1, 2, 3])", "not a JSON object"},
  };
  ExpectRejected(cases);
}

// Lines inside and outside the fast path's subset must parse as the full JSON parser does: the
// fast path may only give up, never answer differently.
TEST(ParseTraceLineTest, FastPathAndFullParserAgree) {
  const std::pair<const char*, std::vector<uint64_t>> cases[] = {
      // The trace tools' own shapes.
      {R"({"timestamp":7,"input_length":8,"output_length":9,"hash_ids":[1,2,3],"session":4})",
       {7, 8, 9, 1, 2, 3}},
      {" {\"timestamp\" :7 ,\t\"input_length\": 8,\"output_length\":9,\"hash_ids\":[ 1 ,2, 3 ] "
       "}\r",
       {7, 8, 9, 1, 2, 3}},
      {R"({"timestamp":7,"input_length":8,"output_length":9,"hash_ids":[ ]})", {7, 8, 9}},
      {R"({"timestamp":0,"input_length":18446744073709551615,"output_length":9,"hash_ids":[0]})",
       {0, UINT64_MAX, 9, 0}},
      // Outside the subset: escapes, floats, nesting, null, a duplicated field (the last wins).
      {R"({"note":"a\"b","timestamp":7,"input_length":8,"output_length":9,"hash_ids":[1]})",
       {7, 8, 9, 1}},
      {R"({"x":1.5,"y":{"z":[null,true]},"timestamp":7,"input_length":8,"output_length":9,)"
       R"("hash_ids":[1]})",
       {7, 8, 9, 1}},
      {R"({"timestamp":1,"timestamp":7,"input_length":8,"output_length":9,"hash_ids":[1]})",
       {7, 8, 9, 1}},
      {R"({"timest\u0061mp":7,"input_length":8,"output_length":9,"hash_ids":[1]})", {7, 8, 9, 1}},
  };
  for (const auto& [line, expected] : cases) {
    auto request = ParseTraceLine(line);
    ASSERT_TRUE(request.ok()) << line << ": " << request.status().ToString();
    std::vector<uint64_t> got = {request->timestamp_ms, request->input_tokens,
                                 request->output_tokens};
    got.insert(got.end(), request->hash_ids.begin(), request->hash_ids.end());
    EXPECT_EQ(got, expected) << line;
  }
}

TEST(ParseTraceLineTest, FastPathLeavesBadNumbersToTheFullParser) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"timestamp":18446744073709551616,"input_length":1,"output_length":1,"hash_ids":[]})",
       "\"timestamp\" is not a non-negative integer"},
      {R"({"timestamp":1e3,"input_length":1,"output_length":1,"hash_ids":[]})",
       "\"timestamp\" is not a non-negative integer"},
      {R"({"timestamp":-0,"input_length":1,"output_length":1,"hash_ids":[]})",
       "\"timestamp\" is not a non-negative integer"},
      {R"({"timestamp":01,"input_length":1,"output_length":1,"hash_ids":[]})", "not valid JSON"},
      {R"({"timestamp":1,"input_length":1,"output_length":1,"hash_ids":[1,]})", "not valid JSON"},
      {R"({"timestamp":1,"input_length":1,"output_length":1,"hash_ids":[1]} x)", "not valid JSON"},
      {R"({"timestamp":1,"input_length":1,"output_length":1,"hash_ids":[2.0]})",
       "\"hash_ids\"[0] is not a non-negative integer"},
  };
  ExpectRejected(cases);
}

// Regression: nlohmann stops at a NUL byte, so a good request followed by a NUL and the rest of a
// torn line parsed as that request alone.
TEST(ParseTraceLineTest, ALineWithANulByteIsRefused) {
  const std::string good =
      R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1]})";
  for (const std::string& line : {good + std::string(1, '\0') + R"({"bogus)",
                                  good + std::string(3, '\0'), std::string(1, '\0') + good}) {
    auto request = ParseTraceLine(line);
    ASSERT_FALSE(request.ok()) << line;
    EXPECT_EQ(request.status().message(), "NUL byte in the line");
  }

  const std::string path = WriteFile("torn.jsonl", good + "\n" + good + '\0' + "{\"time\n");
  auto reader = TraceReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_TRUE(reader->Next().ok());
  auto torn = reader->Next();
  ASSERT_FALSE(torn.ok());
  EXPECT_EQ(torn.status().message(), path + ":2: NUL byte in the line");
}

TEST(TraceReaderTest, NextIntoReusesTheRequest) {
  std::string path = WriteFile("reuse.jsonl",
                               "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                               "\"hash_ids\": [1, 2, 3]}\n"
                               "{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1, "
                               "\"hash_ids\": [4]}\n");
  auto reader = TraceReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  TraceRequest request;
  ASSERT_TRUE(reader->NextInto(request).value());
  ASSERT_TRUE(reader->NextInto(request).value());
  EXPECT_EQ(request.timestamp_ms, 5u);
  EXPECT_EQ(request.hash_ids, (std::vector<uint64_t>{4}));
  EXPECT_FALSE(reader->NextInto(request).value());
}

TEST(TraceReaderTest, ReadsRequestsInOrderAndSkipsBlankLines) {
  std::string path = WriteFile("good.jsonl",
                               "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 1, "
                               "\"hash_ids\": [1, 2]}\r\n"
                               "\n   \n"
                               "{\"timestamp\": 3, \"input_length\": 10, \"output_length\": 2, "
                               "\"hash_ids\": [1]}");  // no final newline
  auto trace = ReadTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  ASSERT_EQ(trace->size(), 2u);
  EXPECT_EQ((*trace)[0].hash_ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ((*trace)[1].timestamp_ms, 3u);
}

TEST(TraceReaderTest, StopsAfterMaxRequests) {
  std::string line = R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]})";
  std::string path = WriteFile("three.jsonl", line + "\n" + line + "\n" + line + "\n");
  auto trace = ReadTrace(path, /*max_requests=*/2);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->size(), 2u);
}

TEST(TraceReaderTest, MalformedLineNamesFileAndLine) {
  std::string good = R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]})";
  std::string path = WriteFile(
      "bad.jsonl", good + "\n\n" + R"({"timestamp": 0, "input_length": 1, "output_length": 1})" +
                       "\n" + good + "\n");
  auto reader = TraceReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto first = reader->Next();
  ASSERT_TRUE(first.ok() && first->has_value());
  auto second = reader->Next();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(second.status().message(), path + ":3: missing \"hash_ids\"");

  auto whole = ReadTrace(path);
  ASSERT_FALSE(whole.ok());
  EXPECT_EQ(whole.status().message(), path + ":3: missing \"hash_ids\"");
}

TEST(TraceReaderTest, MissingFileIsNotFound) {
  auto trace = ReadTrace(::testing::TempDir() + "/no-such-trace.jsonl");
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), StatusCode::kNotFound);
  EXPECT_NE(trace.status().message().find("no-such-trace.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::cli
