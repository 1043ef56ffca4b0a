// nvme_format_fuzz: libFuzzer target for the NVMe tier's decoders of on-disk bytes (superblock,
// record header, catalog value and meta entry), which read whatever a damaged disk holds.
//
// Input: one selector byte, then the bytes to decode (padded with zeros to a structure's size where
// the decoder needs a whole 4 KiB). Besides "no crash, no sanitizer report", it checks that a
// successful decode re-encodes to the same bytes: a decoder accepts exactly what the encoder writes
// (for the 4 KiB structures, up to their zero padding, which the checksum covers but no field reads).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tiers/nvme/nvme_format.h"

using namespace kvtier::tiers::nvme;

namespace {

// Bytes of fields (checksum included) before the zero padding; docs/nvme-format.md.
constexpr size_t kSuperblockFieldBytes = 64;
constexpr size_t kRecordFieldBytes = 88;

void Check(bool ok) {
  if (!ok) std::abort();
}

void FuzzSuperblock(const std::byte* p, size_t n) {
  std::vector<std::byte> buf(kSuperblockBytes);
  std::memcpy(buf.data(), p, std::min<size_t>(n, buf.size()));
  auto sb = DecodeSuperblock(buf, "fuzz");
  if (!sb.ok()) return;
  std::vector<std::byte> again(kSuperblockBytes);
  EncodeSuperblock(*sb, again);
  Check(std::memcmp(again.data(), buf.data(), kSuperblockFieldBytes) == 0);
}

void FuzzRecordHeader(const std::byte* p, size_t n) {
  std::vector<std::byte> buf(kRecordHeaderBytes);
  std::memcpy(buf.data(), p, std::min<size_t>(n, buf.size()));
  auto h = DecodeRecordHeader(buf);
  if (!h.ok()) return;
  std::vector<std::byte> again(kRecordHeaderBytes);
  EncodeRecordHeader(*h, again);
  Check(std::memcmp(again.data(), buf.data(), kRecordFieldBytes) == 0);
}

void FuzzCatalogValue(const char* p, size_t n) {
  size_t key_bytes = std::min<size_t>(n, kCatalogKeyBytes);
  std::string key(p, key_bytes), value(p + key_bytes, n - key_bytes);
  auto rec = DecodeCatalogValue(key, value);
  if (!rec.ok()) return;
  Check(EncodeCatalogValue(*rec) == value);
  Check(EncodeCatalogKey(rec->ns, rec->key) == key);
}

void FuzzCatalogMeta(const char* p, size_t n) {
  auto id = DecodeCatalogMeta(std::string_view(p, n));
  if (id.ok()) Check(EncodeCatalogMeta(*id) == std::string(p, n));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto* bytes = reinterpret_cast<const std::byte*>(data + 1);
  const auto* chars = reinterpret_cast<const char*>(data + 1);
  size_t n = size - 1;
  switch (data[0] % 4) {
    case 0: FuzzSuperblock(bytes, n); break;
    case 1: FuzzRecordHeader(bytes, n); break;
    case 2: FuzzCatalogValue(chars, n); break;
    default: FuzzCatalogMeta(chars, n); break;
  }
  return 0;
}
