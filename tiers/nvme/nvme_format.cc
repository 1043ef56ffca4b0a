#include "tiers/nvme/nvme_format.h"

#include <cstring>

// XXH3_state_t on the stack needs the static-linking declarations.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace kvtier::tiers::nvme {
namespace {

constexpr uint64_t kSuperblockMagic = 0x31564E5245495456ULL;  // "VTIERNV1" read little-endian
constexpr uint64_t kRecordMagic = 0x4B434F4C42545653ULL;      // "SVTBLOCK"
constexpr size_t kSuperblockUsed = 56;                        // bytes before the checksum
constexpr size_t kRecordUsed = 80;
constexpr size_t kValueUsed = kCatalogValueBytes - 8;
constexpr size_t kMetaUsed = kCatalogMetaBytes - 8;

// Little-endian cursor over a byte span; the layouts are fixed, so no bounds checks per field.
class Writer {
 public:
  explicit Writer(std::byte* p) : p_(p) {}
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void Key(const Key128& k) {
    k.ToBytes(p_);
    p_ += 16;
  }
  size_t Done(const std::byte* start) const { return static_cast<size_t>(p_ - start); }

 private:
  // The build targets little-endian hosts only (x86-64, aarch64), so memcpy is the encoding.
  void Raw(const void* v, size_t n) {
    std::memcpy(p_, v, n);
    p_ += n;
  }
  std::byte* p_;
};

class Reader {
 public:
  explicit Reader(const std::byte* p) : p_(p) {}
  uint32_t U32() { return Raw<uint32_t>(); }
  uint64_t U64() { return Raw<uint64_t>(); }
  template <typename K>
  K Key() {
    K k;
    static_cast<Key128&>(k) = Key128::FromBytes(p_);
    p_ += 16;
    return k;
  }

 private:
  template <typename T>
  T Raw() {
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  const std::byte* p_;
};

// XXH3-64 of a fixed-size structure of `total` bytes whose checksum sits at [used, used + 8): it
// covers the fields before it and the zero padding after it, so no bit of the structure can change
// unnoticed.
uint64_t SealHash(const std::byte* p, size_t used, size_t total) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, p, used);
  XXH3_64bits_update(&state, p + used + 8, total - used - 8);
  return XXH3_64bits_digest(&state);
}

uint64_t StoredChecksum(const std::byte* p, size_t at) {
  uint64_t v;
  std::memcpy(&v, p + at, 8);
  return v;
}

void Seal(std::byte* p, size_t used, size_t total) {
  uint64_t sum = SealHash(p, used, total);
  std::memcpy(p + used, &sum, 8);
}

bool SealOk(const std::byte* p, size_t used, size_t total) {
  return StoredChecksum(p, used) == SealHash(p, used, total);
}

// The zero padding after a sealed structure's checksum. The checksum covers it, so only bytes
// crafted to match could carry anything else; they are refused all the same, so that a decoder
// accepts exactly what the encoder writes.
bool PaddingIsZero(const std::byte* p, size_t used, size_t total) {
  for (size_t i = used + 8; i < total; ++i) {
    if (p[i] != std::byte{0}) return false;
  }
  return true;
}

std::string VersionMismatch(const std::string& what, uint32_t found) {
  return what + " has format version " + std::to_string(found) + ", this build reads version " +
         std::to_string(kFormatVersion) +
         "; remove the NVMe data directory or start with a forced cold start";
}

}  // namespace

void EncodeSuperblock(const Superblock& sb, std::span<std::byte> out) {
  std::memset(out.data(), 0, kSuperblockBytes);
  Writer w(out.data());
  w.U64(kSuperblockMagic);
  w.U32(sb.format_version);
  w.U32(static_cast<uint32_t>(kSuperblockBytes));
  w.U32(static_cast<uint32_t>(kBlockAlignment));
  w.U32(static_cast<uint32_t>(kRecordHeaderBytes));
  w.U64(sb.data_offset);
  w.U64(sb.capacity_bytes);
  w.U64(sb.file_id);
  w.U64(sb.created_unix_us);
  Seal(out.data(), kSuperblockUsed, kSuperblockBytes);
}

Result<Superblock> DecodeSuperblock(std::span<const std::byte> in, const std::string& file) {
  if (in.size() < kSuperblockBytes) return Corruption(file + ": superblock truncated");
  Reader r(in.data());
  if (r.U64() != kSuperblockMagic) {
    return Corruption(file + " is not a kvtier NVMe data file (bad magic)");
  }
  Superblock sb;
  sb.format_version = r.U32();
  if (sb.format_version != kFormatVersion)
    return Corruption(VersionMismatch(file, sb.format_version));
  if (!SealOk(in.data(), kSuperblockUsed, kSuperblockBytes)) {
    return Corruption(file + ": superblock checksum mismatch");
  }
  if (!PaddingIsZero(in.data(), kSuperblockUsed, kSuperblockBytes)) {
    return Corruption(file + ": superblock padding is not zero");
  }
  uint32_t sb_bytes = r.U32(), alignment = r.U32(), header_bytes = r.U32();
  if (sb_bytes != kSuperblockBytes || alignment != kBlockAlignment ||
      header_bytes != kRecordHeaderBytes) {
    return Corruption(file + ": unsupported geometry (superblock " + std::to_string(sb_bytes) +
                      ", alignment " + std::to_string(alignment) + ", record header " +
                      std::to_string(header_bytes) + ")");
  }
  sb.data_offset = r.U64();
  sb.capacity_bytes = r.U64();
  sb.file_id = r.U64();
  sb.created_unix_us = r.U64();
  if (sb.data_offset % kBlockAlignment != 0 || sb.capacity_bytes % kBlockAlignment != 0) {
    return Corruption(file + ": data region is not aligned");
  }
  return sb;
}

void EncodeRecordHeader(const RecordHeader& h, std::span<std::byte> out) {
  std::memset(out.data(), 0, kRecordHeaderBytes);
  Writer w(out.data());
  w.U64(kRecordMagic);
  w.U32(kFormatVersion);
  w.U32(static_cast<uint32_t>(kRecordHeaderBytes));
  w.Key(h.ns);
  w.Key(h.key);
  w.U64(h.payload_bytes);
  w.U64(h.payload_checksum);
  w.U64(h.file_id);
  w.U64(0);  // reserved
  Seal(out.data(), kRecordUsed, kRecordHeaderBytes);
}

Result<RecordHeader> DecodeRecordHeader(std::span<const std::byte> in) {
  if (in.size() < kRecordHeaderBytes) return ChecksumMismatch("record header truncated");
  Reader r(in.data());
  if (r.U64() != kRecordMagic) return ChecksumMismatch("record header has a bad magic");
  uint32_t version = r.U32();
  if (version != kFormatVersion) {
    return ChecksumMismatch("record header of unknown version " + std::to_string(version));
  }
  if (!SealOk(in.data(), kRecordUsed, kRecordHeaderBytes)) {
    return ChecksumMismatch("record header checksum mismatch");
  }
  if (!PaddingIsZero(in.data(), kRecordUsed, kRecordHeaderBytes)) {
    return ChecksumMismatch("record header padding is not zero");
  }
  if (r.U32() != kRecordHeaderBytes) return ChecksumMismatch("record header of unknown size");
  RecordHeader h;
  h.ns = r.Key<NamespaceId>();
  h.key = r.Key<BlockKey>();
  h.payload_bytes = r.U64();
  h.payload_checksum = r.U64();
  h.file_id = r.U64();
  if (r.U64() != 0) return ChecksumMismatch("record header has a non-zero reserved field");
  return h;
}

std::string EncodeCatalogKey(const NamespaceId& ns, const BlockKey& key) {
  std::string out(kCatalogKeyBytes, '\0');
  out[0] = 'b';
  auto* p = reinterpret_cast<std::byte*>(out.data());
  ns.ToBytes(p + 1);
  key.ToBytes(p + 17);
  return out;
}

std::string EncodeCatalogValue(const CatalogRecord& rec) {
  std::string out(kCatalogValueBytes, '\0');
  auto* p = reinterpret_cast<std::byte*>(out.data());
  Writer w(p);
  w.U32(kFormatVersion);
  w.U32(0);  // reserved
  w.Key(rec.ns);
  w.Key(rec.key);
  w.U64(rec.offset);
  w.U64(rec.payload_bytes);
  w.U64(rec.payload_checksum);
  w.U64(rec.last_access_unix_us);
  Seal(p, kValueUsed, kCatalogValueBytes);
  return out;
}

Result<CatalogRecord> DecodeCatalogValue(std::string_view catalog_key, std::string_view value) {
  if (value.size() != kCatalogValueBytes) {
    return Corruption("catalog value of " + std::to_string(value.size()) + " bytes");
  }
  const auto* p = reinterpret_cast<const std::byte*>(value.data());
  if (!SealOk(p, kValueUsed, kCatalogValueBytes)) {
    return Corruption("catalog value checksum mismatch");
  }
  Reader r(p);
  uint32_t version = r.U32();
  if (version != kFormatVersion) return Corruption(VersionMismatch("catalog value", version));
  if (r.U32() != 0) return Corruption("catalog value has a non-zero reserved field");
  CatalogRecord rec;
  rec.ns = r.Key<NamespaceId>();
  rec.key = r.Key<BlockKey>();
  rec.offset = r.U64();
  rec.payload_bytes = r.U64();
  rec.payload_checksum = r.U64();
  rec.last_access_unix_us = r.U64();
  if (EncodeCatalogKey(rec.ns, rec.key) != catalog_key) {
    return Corruption("catalog value does not belong to its key");
  }
  return rec;
}

std::string EncodeCatalogMeta(uint64_t file_id) {
  std::string out(kCatalogMetaBytes, '\0');
  auto* p = reinterpret_cast<std::byte*>(out.data());
  Writer w(p);
  w.U32(kFormatVersion);
  w.U32(0);
  w.U64(file_id);
  Seal(p, kMetaUsed, kCatalogMetaBytes);
  return out;
}

Result<uint64_t> DecodeCatalogMeta(std::string_view value) {
  if (value.size() != kCatalogMetaBytes) return Corruption("catalog meta entry has a bad size");
  const auto* p = reinterpret_cast<const std::byte*>(value.data());
  Reader r(p);
  uint32_t version = r.U32();
  if (version != kFormatVersion) return Corruption(VersionMismatch("the catalog", version));
  if (!SealOk(p, kMetaUsed, kCatalogMetaBytes)) {
    return Corruption("catalog meta entry checksum mismatch");
  }
  if (r.U32() != 0) return Corruption("catalog meta entry has a non-zero reserved field");
  return r.U64();
}

}  // namespace kvtier::tiers::nvme
