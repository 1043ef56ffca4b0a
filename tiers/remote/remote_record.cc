#include "tiers/remote/remote_record.h"

#include <xxhash.h>

#include <cstring>

#include "hashing/payload_checksum.h"

namespace kvtier::tiers::remote {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'T', 'R', 'E', 'M', 'O', 'T'};
constexpr size_t kVersionAt = 8;
constexpr size_t kHeaderBytesAt = 12;
constexpr size_t kNamespaceAt = 16;
constexpr size_t kKeyAt = 32;
constexpr size_t kPayloadBytesAt = 48;
constexpr size_t kPayloadChecksumAt = 56;
constexpr size_t kHeaderChecksumAt = 64;

// The build targets little-endian hosts only (x86-64, aarch64), so memcpy is the encoding.
template <typename T>
void Put(std::byte* out, size_t at, T value) {
  std::memcpy(out + at, &value, sizeof(T));
}

template <typename T>
T Get(const std::byte* in, size_t at) {
  T value;
  std::memcpy(&value, in + at, sizeof(T));
  return value;
}

uint64_t Hash(const std::byte* p, size_t n) { return XXH3_64bits(p, n); }

}  // namespace

std::array<std::byte, kRecordHeaderBytes> EncodeRecordHeader(const NamespaceId& ns,
                                                             const BlockKey& key,
                                                             std::span<const std::byte> payload) {
  std::array<std::byte, kRecordHeaderBytes> out{};
  std::byte* p = out.data();
  std::memcpy(p, kMagic, sizeof(kMagic));
  Put<uint32_t>(p, kVersionAt, kRecordFormatVersion);
  Put<uint32_t>(p, kHeaderBytesAt, kRecordHeaderBytes);
  ns.ToBytes(p + kNamespaceAt);
  key.ToBytes(p + kKeyAt);
  Put<uint64_t>(p, kPayloadBytesAt, payload.size());
  Put<uint64_t>(p, kPayloadChecksumAt, hashing::PayloadChecksum(payload));
  Put<uint64_t>(p, kHeaderChecksumAt, Hash(p, kHeaderChecksumAt));
  return out;
}

std::string EncodeRecord(const NamespaceId& ns, const BlockKey& key,
                         std::span<const std::byte> payload) {
  const auto header = EncodeRecordHeader(ns, key, payload);
  std::string out(kRecordHeaderBytes + payload.size(), '\0');
  std::memcpy(out.data(), header.data(), header.size());
  if (!payload.empty())
    std::memcpy(out.data() + kRecordHeaderBytes, payload.data(), payload.size());
  return out;
}

Result<RecordHeader> DecodeRecordHeader(std::span<const std::byte> value) {
  if (value.size() < kRecordHeaderBytes) {
    return Corruption("remote value of " + std::to_string(value.size()) +
                      " bytes is shorter than a kvtier record header");
  }
  const std::byte* p = value.data();
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) {
    return Corruption("remote value is not a kvtier record (unknown magic)");
  }
  const uint32_t version = Get<uint32_t>(p, kVersionAt);
  const uint32_t header_bytes = Get<uint32_t>(p, kHeaderBytesAt);
  // The version is checked before the checksum: another version may place the checksum elsewhere.
  if (version != kRecordFormatVersion || header_bytes != kRecordHeaderBytes) {
    return Corruption("remote record format version " + std::to_string(version) + " (header of " +
                      std::to_string(header_bytes) + " bytes); this build reads version " +
                      std::to_string(kRecordFormatVersion));
  }
  if (Get<uint64_t>(p, kHeaderChecksumAt) != Hash(p, kHeaderChecksumAt)) {
    return ChecksumMismatch("remote record header does not match its checksum");
  }
  RecordHeader header;
  static_cast<Key128&>(header.ns) = Key128::FromBytes(p + kNamespaceAt);
  static_cast<Key128&>(header.key) = Key128::FromBytes(p + kKeyAt);
  header.payload_bytes = Get<uint64_t>(p, kPayloadBytesAt);
  header.payload_checksum = Get<uint64_t>(p, kPayloadChecksumAt);
  return header;
}

Result<RecordView> DecodeRecord(std::span<const std::byte> value, const NamespaceId& ns,
                                const BlockKey& key) {
  KVTIER_ASSIGN_OR_RETURN(RecordHeader header, DecodeRecordHeader(value));
  if (header.ns != ns || header.key != key) {
    return Corruption("remote record of block " + header.ns.ToHex() + "/" + header.key.ToHex() +
                      " found under the key of " + ns.ToHex() + "/" + key.ToHex());
  }
  const uint64_t stored = value.size() - kRecordHeaderBytes;
  if (header.payload_bytes != stored) {
    return Corruption("remote record declares " + std::to_string(header.payload_bytes) +
                      " payload bytes but holds " + std::to_string(stored));
  }
  const std::span<const std::byte> payload = value.subspan(kRecordHeaderBytes);
  if (hashing::PayloadChecksum(payload) != header.payload_checksum) {
    return ChecksumMismatch("remote record payload of " + ns.ToHex() + "/" + key.ToHex() +
                            " does not match its checksum");
  }
  return RecordView{header, payload};
}

Result<RecordView> DecodeRecord(std::string_view value, const NamespaceId& ns,
                                const BlockKey& key) {
  return DecodeRecord(std::as_bytes(std::span<const char>(value.data(), value.size())), ns, key);
}

std::string RemoteKey(const NamespaceId& ns, const BlockKey& key) {
  return "kvt1:" + ns.ToHex() + ":" + key.ToHex();
}

}  // namespace kvtier::tiers::remote
