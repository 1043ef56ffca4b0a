#include "tiers/remote/remote_record.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace kvtier::tiers::remote {
namespace {

NamespaceId Ns(uint64_t v) {
  NamespaceId ns;
  ns.high = v;
  ns.low = ~v;
  return ns;
}

BlockKey Key(uint64_t v) {
  BlockKey key;
  key.high = v * 3;
  key.low = v;
  return key;
}

std::vector<std::byte> Payload(size_t n) {
  std::vector<std::byte> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>(i * 7 + 1);
  return p;
}

TEST(RemoteRecord, RoundTripKeepsHeaderAndPayload) {
  const auto payload = Payload(5000);
  const std::string value = EncodeRecord(Ns(1), Key(2), payload);
  ASSERT_EQ(value.size(), kRecordHeaderBytes + payload.size());
  const Result<RecordView> view = DecodeRecord(value, Ns(1), Key(2));
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->header.ns, Ns(1));
  EXPECT_EQ(view->header.key, Key(2));
  EXPECT_EQ(view->header.payload_bytes, payload.size());
  ASSERT_EQ(view->payload.size(), payload.size());
  EXPECT_EQ(std::memcmp(view->payload.data(), payload.data(), payload.size()), 0);
}

TEST(RemoteRecord, EmptyPayloadIsAValidRecord) {
  const std::string value = EncodeRecord(Ns(1), Key(2), {});
  const Result<RecordView> view = DecodeRecord(value, Ns(1), Key(2));
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_TRUE(view->payload.empty());
}

TEST(RemoteRecord, HeaderPiecePlusPayloadEqualsJoinedRecord) {
  const auto payload = Payload(100);
  const auto header = EncodeRecordHeader(Ns(3), Key(4), payload);
  std::string joined(reinterpret_cast<const char*>(header.data()), header.size());
  joined.append(reinterpret_cast<const char*>(payload.data()), payload.size());
  EXPECT_EQ(joined, EncodeRecord(Ns(3), Key(4), payload));
}

TEST(RemoteRecord, FlippedPayloadBitIsAChecksumMismatch) {
  std::string value = EncodeRecord(Ns(1), Key(2), Payload(64));
  value[kRecordHeaderBytes + 10] ^= 0x10;
  EXPECT_EQ(DecodeRecord(value, Ns(1), Key(2)).status().code(), StatusCode::kChecksumMismatch);
}

TEST(RemoteRecord, EveryFlippedHeaderBitIsRefused) {
  const std::string good = EncodeRecord(Ns(1), Key(2), Payload(64));
  for (size_t byte = 0; byte < kRecordHeaderBytes; ++byte) {
    std::string value = good;
    value[byte] ^= 0x01;
    const StatusCode code = DecodeRecord(value, Ns(1), Key(2)).status().code();
    EXPECT_TRUE(code == StatusCode::kChecksumMismatch || code == StatusCode::kCorruption)
        << "byte " << byte << ": " << StatusCodeName(code);
  }
}

TEST(RemoteRecord, ForeignValueIsCorruption) {
  const std::string foreign(200, 'x');
  const Status st = DecodeRecord(foreign, Ns(1), Key(2)).status();
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("not a kvtier record"), std::string::npos);
  EXPECT_EQ(DecodeRecord(std::string("short"), Ns(1), Key(2)).status().code(),
            StatusCode::kCorruption);
}

TEST(RemoteRecord, RecordOfAnotherBlockIsCorruption) {
  const std::string value = EncodeRecord(Ns(1), Key(2), Payload(64));
  EXPECT_EQ(DecodeRecord(value, Ns(1), Key(3)).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeRecord(value, Ns(9), Key(2)).status().code(), StatusCode::kCorruption);
}

TEST(RemoteRecord, TruncatedOrExtendedValueIsCorruption) {
  const std::string value = EncodeRecord(Ns(1), Key(2), Payload(64));
  EXPECT_EQ(DecodeRecord(value.substr(0, value.size() - 1), Ns(1), Key(2)).status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(DecodeRecord(value + "x", Ns(1), Key(2)).status().code(), StatusCode::kCorruption);
}

TEST(RemoteRecord, OtherFormatVersionNamesBothVersions) {
  std::string value = EncodeRecord(Ns(1), Key(2), Payload(8));
  value[8] = 2;  // the version's low byte
  const Status st = DecodeRecord(value, Ns(1), Key(2)).status();
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("version 2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("version 1"), std::string::npos) << st.message();
}

TEST(RemoteRecord, RemoteKeyNamesNamespaceAndBlockWithoutHashTag) {
  const std::string key = RemoteKey(Ns(1), Key(2));
  EXPECT_EQ(key, "kvt1:" + Ns(1).ToHex() + ":" + Key(2).ToHex());
  EXPECT_EQ(key.find('{'), std::string::npos);
}

}  // namespace
}  // namespace kvtier::tiers::remote
