#include "tiers/remote/command_batch.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvtier::tiers::remote {
namespace {

std::string Flatten(const CommandBatch& batch) {
  std::string out;
  for (const std::string_view piece : batch.Pieces()) out.append(piece);
  return out;
}

TEST(CommandBatch, EncodesCommandsAsArraysOfBulkStrings) {
  CommandBatch batch;
  batch.Command({"GET", "k"});
  batch.Command({"ASKING"});
  EXPECT_EQ(Flatten(batch), "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$6\r\nASKING\r\n");
  EXPECT_EQ(batch.commands(), 2u);
  EXPECT_EQ(batch.size_bytes(), Flatten(batch).size());
  EXPECT_EQ(batch.Pieces().size(), 1u);  // small arguments share one piece
}

TEST(CommandBatch, LargeArgumentPartsAreBorrowedNotCopied) {
  const std::string header = "HDR";
  const std::string payload(CommandBatch::kBorrowThresholdBytes, 'p');
  const std::vector<std::string_view> parts = {header, payload};
  CommandBatch batch;
  batch.Begin(3);
  batch.Arg("SET");
  batch.Arg("k");
  batch.ArgParts(parts);
  const auto pieces = batch.Pieces();
  bool borrowed = false;
  for (const std::string_view p : pieces) borrowed |= p.data() == payload.data();
  EXPECT_TRUE(borrowed);
  EXPECT_EQ(Flatten(batch), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" +
                                std::to_string(header.size() + payload.size()) + "\r\n" + header +
                                payload + "\r\n");
}

}  // namespace
}  // namespace kvtier::tiers::remote
