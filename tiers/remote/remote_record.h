// The value a remote store holds for one block: a fixed record header, then the payload.
//
// A remote store is shared by a fleet and run by someone else, so nothing read from it is trusted:
// another program may have written the key, an operator may have edited it, a node of an older or
// newer kvtier may have used another format, and a value may be truncated. The header names the
// format and the block it belongs to, and carries an XXH3-64 checksum of the payload and one of
// itself, so that a fetched value is either the exact bytes that were published for this block or
// an error: never wrong bytes. docs/scale-out.md describes the layout; change both together and
// bump kRecordFormatVersion when it changes.
//
// Layout (little-endian, kRecordHeaderBytes = 72):
//   0  magic "KVTREMOT"          8 bytes
//   8  format version            u32
//  12  header bytes (72)         u32   (lets a later version grow the header)
//  16  namespace id              16 bytes, Key128::ToBytes
//  32  block key                 16 bytes, Key128::ToBytes
//  48  payload bytes             u64
//  56  payload checksum          u64   XXH3-64 of the payload
//  64  header checksum           u64   XXH3-64 of bytes [0, 64)
//  72  payload
//
// Pure functions of their arguments: thread-safe, no I/O.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/keys.h"
#include "common/status.h"

namespace kvtier::tiers::remote {

inline constexpr uint32_t kRecordFormatVersion = 1;
inline constexpr size_t kRecordHeaderBytes = 72;

struct RecordHeader {
  NamespaceId ns;
  BlockKey key;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;  // XXH3-64 of the payload

  bool operator==(const RecordHeader&) const = default;
};

// A decoded record: its header and a view of the payload inside the value it was decoded from
// (valid as long as that value is).
struct RecordView {
  RecordHeader header;
  std::span<const std::byte> payload;
};

// The header of a record of `payload` for block `key` of namespace `ns`; it hashes the payload.
// The value to store is these bytes followed by the payload itself (a writer may send the two
// pieces without joining them).
std::array<std::byte, kRecordHeaderBytes> EncodeRecordHeader(const NamespaceId& ns,
                                                             const BlockKey& key,
                                                             std::span<const std::byte> payload);

// Header and payload joined in one string: for tests and small values.
std::string EncodeRecord(const NamespaceId& ns, const BlockKey& key,
                         std::span<const std::byte> payload);

// Decodes a value fetched for block `key` of namespace `ns`. Errors (the caller counts them and
// treats the block as a miss; the value may be deleted or left to expire):
// - kCorruption: shorter than a header, another magic (not a kvtier record), another format
//   version or header size (both versions named), a record of another block (a value written or
//   copied under the wrong key), or a payload length that does not match the value's size (a
//   truncated or extended value);
// - kChecksumMismatch: the header or the payload does not match its checksum (damaged bytes).
Result<RecordView> DecodeRecord(std::span<const std::byte> value, const NamespaceId& ns,
                                const BlockKey& key);

// The same for a value held in a string.
Result<RecordView> DecodeRecord(std::string_view value, const NamespaceId& ns, const BlockKey& key);

// The header alone, checked (magic, version, header checksum) but not matched against a block or
// a payload: for tools that list what a store holds, and for the fuzzer. Errors as DecodeRecord.
Result<RecordHeader> DecodeRecordHeader(std::span<const std::byte> value);

// The key under which block `key` of namespace `ns` is stored: "kvt1:" followed by the namespace id
// and the block key in hex, so that an operator can read it in redis-cli. It has no '{', so Redis
// Cluster hashes all of it and blocks spread over every slot. The "1" is the key scheme version.
std::string RemoteKey(const NamespaceId& ns, const BlockKey& key);

}  // namespace kvtier::tiers::remote
