// The NVMe tier's on-disk encodings: data-file superblock, per-block record header, catalog values.
//
// docs/nvme-format.md is the prose version of this file; change both together and bump the version
// constants when a layout changes. Every structure is little-endian, fixed-size, starts with a magic
// or version and carries an XXH3-64 checksum of all its other bytes, so that a torn write, a stale
// sector or a flipped bit is reported as such instead of being trusted. Decoders never trust a
// length or offset they read: the caller checks extents against the file's geometry.
//
// The checksum of the superblock and of a record header covers the whole 4 KiB, padding included.
//
// These are pure functions of their arguments: thread-safe, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/keys.h"
#include "common/status.h"
#include "common/types.h"
#include "hashing/payload_checksum.h"

namespace kvtier::tiers::nvme {

inline constexpr uint32_t kFormatVersion = 1;
// The O_DIRECT unit: data offsets, record headers and payload lengths on disk are multiples of it.
inline constexpr uint64_t kBlockAlignment = 4096;
inline constexpr uint64_t kSuperblockBytes = 4096;    // at offset 0 of the data file
inline constexpr uint64_t kRecordHeaderBytes = 4096;  // at the start of every extent

// The first 4 KiB of a data file. The data region (extents) starts at data_offset.
struct Superblock {
  uint32_t format_version = kFormatVersion;
  uint64_t data_offset = kSuperblockBytes;
  uint64_t capacity_bytes = 0;  // bytes of the data region
  uint64_t file_id = 0;         // random per formatting; records and catalog must carry the same
  uint64_t created_unix_us = 0;
};

// Encodes into `out` (at least kSuperblockBytes; the rest of the 4 KiB is zeroed).
void EncodeSuperblock(const Superblock& sb, std::span<std::byte> out);
// kCorruption naming `file` when the magic, version (both versions named) or checksum is wrong.
Result<Superblock> DecodeSuperblock(std::span<const std::byte> in, const std::string& file);

// The header written in the first 4 KiB of a block's extent; the payload follows it.
struct RecordHeader {
  NamespaceId ns;
  BlockKey key;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;  // XXH3-64 of the payload bytes
  uint64_t file_id = 0;           // Superblock::file_id of the formatting that wrote it
};

void EncodeRecordHeader(const RecordHeader& h, std::span<std::byte> out);
// kChecksumMismatch when the magic, version or header checksum is wrong (a torn, stale or damaged
// header: the block is unreadable, not the file).
Result<RecordHeader> DecodeRecordHeader(std::span<const std::byte> in);

// One catalog entry: where a block is and what its header must say.
struct CatalogRecord {
  NamespaceId ns;
  BlockKey key;
  uint64_t offset = 0;  // extent offset in the data region (the record header's position)
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
  uint64_t last_access_unix_us = 0;
};

inline constexpr size_t kCatalogKeyBytes = 33;    // 'b' + namespace id + block key
inline constexpr size_t kCatalogValueBytes = 80;  // see docs/nvme-format.md
inline constexpr size_t kCatalogMetaBytes = 24;

std::string EncodeCatalogKey(const NamespaceId& ns, const BlockKey& key);
std::string EncodeCatalogValue(const CatalogRecord& r);
// kCorruption when the size, version or checksum is wrong, or when the value names another key
// than `catalog_key` (a value copied or corrupted into the wrong slot).
Result<CatalogRecord> DecodeCatalogValue(std::string_view catalog_key, std::string_view value);

// The catalog's one meta entry ("meta"): which formatting of the data file the records describe.
inline constexpr std::string_view kCatalogMetaKey = "meta";
std::string EncodeCatalogMeta(uint64_t file_id);
// kCorruption on bad size or checksum, or a version other than kFormatVersion (both named).
Result<uint64_t> DecodeCatalogMeta(std::string_view value);

// XXH3-64 of a payload: the checksum each record header and catalog record carries.
using hashing::PayloadChecksum;

// Bytes an extent of a block of `payload_bytes` takes in the data region: the record header plus
// the payload rounded up to kBlockAlignment.
constexpr uint64_t ExtentFootprint(uint64_t payload_bytes) {
  return kRecordHeaderBytes + (payload_bytes + kBlockAlignment - 1) / kBlockAlignment *
                                  kBlockAlignment;
}

}  // namespace kvtier::tiers::nvme
