#include "hashing/namespace_descriptor.h"

#include <xxhash.h>

#include <array>
#include <utility>

#include "common/utf8.h"

namespace kvtier::hashing {
namespace {

// Field tags of the canonical encoding, in encoding order. The values are part of the hash scheme
// (docs/hashing.md): never renumber them, only append under a new hash_scheme_version. The scheme
// version goes first so that a reader of a stored encoding finds it at a fixed offset.
enum class FieldTag : uint8_t {
  kHashSchemeVersion = 0x01,
  kModelId = 0x02,
  kModelRevision = 0x03,
  kKvDtype = 0x04,
  kNumLayers = 0x05,
  kNumKvHeads = 0x06,
  kHeadDim = 0x07,
  kTokensPerBlock = 0x08,
  kLayoutTag = 0x09,
  kTpRank = 0x0A,
  kTpSize = 0x0B,
  kTenantSalt = 0x0C,
};

constexpr std::string_view kMagic = "kvtier-ns";

struct DtypeSize {
  std::string_view name;
  uint32_t bytes;
};
constexpr std::array<DtypeSize, 6> kDtypes = {{
    {"fp32", 4},
    {"fp16", 2},
    {"bf16", 2},
    {"fp8_e4m3", 1},
    {"fp8_e5m2", 1},
    {"int8", 1},
}};

void AppendU32Le(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void AppendU64Le(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void AppendString(std::string& out, FieldTag tag, std::string_view value) {
  out.push_back(static_cast<char>(tag));
  // Strings longer than 4 GiB cannot be encoded; Validate() caps them far below that, and
  // CanonicalEncoding() of an unvalidated descriptor is only ever used for diagnostics.
  AppendU32Le(out, static_cast<uint32_t>(value.size()));
  out.append(value);
}

void AppendInt(std::string& out, FieldTag tag, uint64_t value) {
  out.push_back(static_cast<char>(tag));
  AppendU32Le(out, 8);
  AppendU64Le(out, value);
}

Status CheckRange(std::string_view field, uint32_t value, uint32_t max) {
  if (value >= 1 && value <= max) return Status::Ok();
  return InvalidArgument(std::string(field) + ": must be in [1, " + std::to_string(max) +
                         "], got " + std::to_string(value));
}

Status CheckLength(std::string_view field, const std::string& value) {
  if (value.size() <= kMaxStringFieldBytes) return Status::Ok();
  return InvalidArgument(std::string(field) + ": longer than " +
                         std::to_string(kMaxStringFieldBytes) + " bytes (" +
                         std::to_string(value.size()) + ")");
}

// The text fields name the namespace in /stats (JSON) and /metrics (Prometheus labels), which
// require UTF-8: one bad name would otherwise break those pages for everyone. The tenant salt is
// never shown and may be any bytes.
Status CheckText(std::string_view field, const std::string& value) {
  KVTIER_RETURN_IF_ERROR(CheckLength(field, value));
  if (IsValidUtf8(value)) return Status::Ok();
  return InvalidArgument(std::string(field) + ": not valid UTF-8");
}

}  // namespace

uint32_t BytesPerElement(std::string_view kv_dtype) {
  for (const DtypeSize& d : kDtypes) {
    if (d.name == kv_dtype) return d.bytes;
  }
  return 0;
}

Status Validate(const NamespaceDescriptor& desc) {
  if (desc.model_id.empty()) return InvalidArgument("model_id: must not be empty");
  KVTIER_RETURN_IF_ERROR(CheckText("model_id", desc.model_id));
  KVTIER_RETURN_IF_ERROR(CheckText("model_revision", desc.model_revision));
  if (BytesPerElement(desc.kv_dtype) == 0) {
    return InvalidArgument("kv_dtype: unknown dtype '" + desc.kv_dtype.substr(0, 64) +
                           "' (expected fp32, fp16, bf16, fp8_e4m3, fp8_e5m2 or int8)");
  }
  KVTIER_RETURN_IF_ERROR(CheckRange("num_layers", desc.num_layers, kMaxLayers));
  KVTIER_RETURN_IF_ERROR(CheckRange("num_kv_heads", desc.num_kv_heads, kMaxKvHeads));
  KVTIER_RETURN_IF_ERROR(CheckRange("head_dim", desc.head_dim, kMaxHeadDim));
  KVTIER_RETURN_IF_ERROR(CheckRange("tokens_per_block", desc.tokens_per_block, kMaxTokensPerBlock));
  if (desc.layout_tag.empty()) return InvalidArgument("layout_tag: must not be empty");
  KVTIER_RETURN_IF_ERROR(CheckText("layout_tag", desc.layout_tag));
  KVTIER_RETURN_IF_ERROR(CheckRange("tp_size", desc.tp_size, kMaxTpSize));
  if (desc.tp_rank >= desc.tp_size) {
    return InvalidArgument("tp_rank: must be below tp_size (" + std::to_string(desc.tp_size) +
                           "), got " + std::to_string(desc.tp_rank));
  }
  if (desc.hash_scheme_version != kCurrentHashSchemeVersion) {
    return InvalidArgument("hash_scheme_version: unsupported version " +
                           std::to_string(desc.hash_scheme_version) +
                           " (supported: " + std::to_string(kCurrentHashSchemeVersion) + ")");
  }
  return CheckLength("tenant_salt", desc.tenant_salt);
}

uint64_t BlockBytes(const NamespaceDescriptor& desc) {
  if (!Validate(desc).ok()) return 0;
  return uint64_t{2} * desc.num_layers * desc.num_kv_heads * desc.head_dim * desc.tokens_per_block *
         BytesPerElement(desc.kv_dtype);
}

std::string CanonicalEncoding(const NamespaceDescriptor& desc) {
  std::string out;
  out.reserve(kMagic.size() + 12 * 5 + 7 * 8 + desc.model_id.size() + desc.model_revision.size() +
              desc.kv_dtype.size() + desc.layout_tag.size() + desc.tenant_salt.size());
  out.append(kMagic);
  AppendInt(out, FieldTag::kHashSchemeVersion, desc.hash_scheme_version);
  AppendString(out, FieldTag::kModelId, desc.model_id);
  AppendString(out, FieldTag::kModelRevision, desc.model_revision);
  AppendString(out, FieldTag::kKvDtype, desc.kv_dtype);
  AppendInt(out, FieldTag::kNumLayers, desc.num_layers);
  AppendInt(out, FieldTag::kNumKvHeads, desc.num_kv_heads);
  AppendInt(out, FieldTag::kHeadDim, desc.head_dim);
  AppendInt(out, FieldTag::kTokensPerBlock, desc.tokens_per_block);
  AppendString(out, FieldTag::kLayoutTag, desc.layout_tag);
  AppendInt(out, FieldTag::kTpRank, desc.tp_rank);
  AppendInt(out, FieldTag::kTpSize, desc.tp_size);
  AppendString(out, FieldTag::kTenantSalt, desc.tenant_salt);
  return out;
}

Result<NamespaceId> ComputeNamespaceId(const NamespaceDescriptor& desc) {
  KVTIER_RETURN_IF_ERROR(Validate(desc));
  const std::string encoding = CanonicalEncoding(desc);
  const XXH128_hash_t h = XXH3_128bits(encoding.data(), encoding.size());
  NamespaceId id;
  id.high = h.high64;
  id.low = h.low64;
  return id;
}

std::string NamespaceRef(const NamespaceId& id) {
  unsigned char bytes[16];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<unsigned char>(id.high >> (56 - 8 * i));
    bytes[8 + i] = static_cast<unsigned char>(id.low >> (56 - 8 * i));
  }
  const uint64_t h = XXH3_64bits_withSeed(bytes, sizeof bytes, kNamespaceRefSeed);
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 0; i < 16; ++i) out[i] = kDigits[(h >> (60 - 4 * i)) & 0xf];
  return out;
}

}  // namespace kvtier::hashing
