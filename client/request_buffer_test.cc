#include "client/request_buffer.h"

#include <gtest/gtest.h>

#include <string>

#include "common/resp/request_parser.h"

namespace kvtier::client {
namespace {

TEST(RequestBufferTest, EncodesArraysOfBulkStrings) {
  RequestBuffer buffer;
  buffer.BeginCommand(3);
  buffer.AppendArg("SET");
  buffer.AppendArg("k");
  buffer.AppendArg(uint64_t{42});
  EXPECT_EQ(buffer.Flatten(), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n42\r\n");
  EXPECT_EQ(buffer.commands(), 1u);
  EXPECT_EQ(buffer.size_bytes(), buffer.Flatten().size());
  // Small arguments share one piece: one iovec for the whole command.
  EXPECT_EQ(buffer.pieces().size(), 1u);
}

TEST(RequestBufferTest, SaysWhichCommandAByteBelongsTo) {
  RequestBuffer buffer;
  buffer.BeginCommand(1);
  buffer.AppendArg("PING");  // 14 bytes: *1\r\n$4\r\nPING\r\n
  buffer.BeginCommand(2);
  buffer.AppendArg("ECHO");
  buffer.AppendArgView(std::string(RequestBuffer::kBorrowThresholdBytes, 'p'));
  EXPECT_EQ(buffer.CommandAt(0), 0u);
  EXPECT_EQ(buffer.CommandAt(13), 0u);
  EXPECT_EQ(buffer.CommandAt(14), 1u);
  EXPECT_EQ(buffer.CommandAt(buffer.size_bytes() - 1), 1u);
  EXPECT_EQ(buffer.CommandAt(buffer.size_bytes()), 2u);
  buffer.Clear();
  EXPECT_EQ(buffer.commands(), 0u);
  EXPECT_EQ(buffer.CommandAt(0), 0u);
}

TEST(RequestBufferTest, BorrowsLargePayloadsWithoutCopying) {
  const std::string payload(RequestBuffer::kBorrowThresholdBytes, 'p');
  RequestBuffer buffer;
  buffer.BeginCommand(2);
  buffer.AppendArg("ECHO");
  buffer.AppendArgView(payload);
  ASSERT_EQ(buffer.pieces().size(), 3u);
  EXPECT_FALSE(buffer.pieces()[1].owned);
  EXPECT_EQ(buffer.PieceData(buffer.pieces()[1]), payload.data());
  EXPECT_EQ(buffer.Flatten(), "*2\r\n$4\r\nECHO\r\n$4096\r\n" + payload + "\r\n");
}

TEST(RequestBufferTest, GathersSegmentsIntoOneArgument) {
  const std::string a(5000, 'a');
  const std::string b = "bb";
  RequestBuffer buffer;
  buffer.BeginCommand(1);
  buffer.AppendBulkHeader(a.size() + b.size());
  buffer.AppendBorrowed(a.data(), a.size());
  buffer.AppendBorrowed(b.data(), b.size());
  buffer.EndBulk();

  // What the daemon's parser makes of it is one argument holding both segments.
  resp::RequestParser parser;
  const std::string wire = buffer.Flatten();
  Result<size_t> used = parser.Feed(wire);
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(*used, wire.size());
  ASSERT_TRUE(parser.has_command());
  EXPECT_EQ(parser.TakeCommand().args.at(0), a + b);
}

TEST(RequestBufferTest, ManyCommandsParseBackInOrder) {
  RequestBuffer buffer;
  for (uint64_t i = 0; i < 100; ++i) {
    buffer.BeginCommand(2);
    buffer.AppendArg("GET");
    buffer.AppendArg(i);
  }
  EXPECT_EQ(buffer.commands(), 100u);
  resp::RequestParser parser;
  std::string_view wire_view;
  const std::string wire = buffer.Flatten();
  wire_view = wire;
  for (uint64_t i = 0; i < 100; ++i) {
    Result<size_t> used = parser.Feed(wire_view);
    ASSERT_TRUE(used.ok());
    wire_view.remove_prefix(*used);
    ASSERT_TRUE(parser.has_command());
    EXPECT_EQ(parser.TakeCommand().args.at(1), std::to_string(i));
  }
  EXPECT_TRUE(wire_view.empty());
  buffer.Clear();
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(buffer.size_bytes(), 0u);
}

}  // namespace
}  // namespace kvtier::client
