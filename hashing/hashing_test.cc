// Golden vectors for the hash scheme (docs/hashing.md lists the same values). Each expected value
// is checked twice: against the implementation, and against XXH3-128 of a byte buffer built here by
// hand from the documented layout, so a change to the encoding cannot pass by changing both sides.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hashing/block_hasher.h"
#include "hashing/namespace_descriptor.h"

namespace kvtier::hashing {
namespace {

// Writes the documented primitives, independently of the implementation's helpers.
class Bytes {
 public:
  Bytes& Raw(std::string_view s) {
    for (char c : s) buf_.push_back(static_cast<uint8_t>(c));
    return *this;
  }
  Bytes& U8(uint8_t v) {
    buf_.push_back(v);
    return *this;
  }
  Bytes& U32Le(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Bytes& U64Le(uint64_t v) {
    for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Bytes& KeyBe(const Key128& k) {
    for (int i = 7; i >= 0; --i) buf_.push_back(static_cast<uint8_t>(k.high >> (8 * i)));
    for (int i = 7; i >= 0; --i) buf_.push_back(static_cast<uint8_t>(k.low >> (8 * i)));
    return *this;
  }
  Bytes& StrField(uint8_t tag, std::string_view s) { return U8(tag).U32Le(s.size()).Raw(s); }
  Bytes& IntField(uint8_t tag, uint64_t v) { return U8(tag).U32Le(8).U64Le(v); }

  std::string Xxh3Hex() const {
    const XXH128_hash_t h = XXH3_128bits(buf_.data(), buf_.size());
    return Key128{h.high64, h.low64}.ToHex();
  }
  size_t size() const { return buf_.size(); }

 private:
  std::vector<uint8_t> buf_;
};

NamespaceDescriptor GoldenDescriptor() {
  NamespaceDescriptor d;
  d.model_id = "meta-llama/Llama-3.1-8B-Instruct";
  d.model_revision = "main";
  d.kv_dtype = "bf16";
  d.num_layers = 32;
  d.num_kv_heads = 8;
  d.head_dim = 128;
  d.tokens_per_block = 16;
  d.layout_tag = "vllm_nhd";
  d.tp_rank = 0;
  d.tp_size = 1;
  d.hash_scheme_version = 1;
  d.tenant_salt = "";
  return d;
}

Bytes GoldenDescriptorBytes(std::string_view salt) {
  Bytes b;
  b.Raw("kvtier-ns")
      .IntField(0x01, 1)
      .StrField(0x02, "meta-llama/Llama-3.1-8B-Instruct")
      .StrField(0x03, "main")
      .StrField(0x04, "bf16")
      .IntField(0x05, 32)
      .IntField(0x06, 8)
      .IntField(0x07, 128)
      .IntField(0x08, 16)
      .StrField(0x09, "vllm_nhd")
      .IntField(0x0A, 0)
      .IntField(0x0B, 1)
      .StrField(0x0C, salt);
  return b;
}

// tokens[i] = i * 2654435761 mod 2^32: 50 tokens, three full 16-token blocks and two left over.
// The multiplier makes every byte of a token matter, so a byte-order mistake cannot hide.
std::vector<uint32_t> GoldenTokens() {
  std::vector<uint32_t> t(50);
  for (uint32_t i = 0; i < t.size(); ++i) t[i] = i * 2654435761u;
  return t;
}

Bytes TokenBlockBytes(const Key128& parent, std::span<const uint32_t> block,
                      std::string_view extra) {
  Bytes b;
  b.KeyBe(parent).U8(0x01).U32Le(block.size());
  for (uint32_t t : block) b.U32Le(t);
  b.U8(0x02).U32Le(extra.size()).Raw(extra);
  return b;
}

std::string ForeignHash(uint8_t first) {
  std::string s(32, '\0');
  for (int i = 0; i < 32; ++i) s[i] = static_cast<char>(first + i);
  return s;
}

// Computed once, and reproduced with the PyPI xxhash package from docs/hashing.md alone.
constexpr std::string_view kGoldenNamespace = "ad88b852fe217fcf154e1f2b9ae7f775";
constexpr std::string_view kGoldenSaltedNamespace = "c062b7c15e11d7217c3a20c2a7fd3f2e";
constexpr std::string_view kGoldenBlockKeys[3] = {
    "cacef79069860d4b0ccb38bfbf9a9aa2",
    "f03b24258c81ca27ae7237c1a81cf2b6",
    "c234b4e14887e8b70e64b39559ffe99a",
};
constexpr std::string_view kGoldenExtraKey = "c7827d875d1f2549e211f643fbc498eb";
constexpr std::string_view kGoldenForeignKeys[2] = {
    "90795d9e6e0e94195a7f25d120ba1c27",
    "eba4e5ef417baf81e8e8e4c43c3c5476",
};

NamespaceId GoldenNamespaceId() { return ComputeNamespaceId(GoldenDescriptor()).value(); }

TEST(GoldenTest, NamespaceEncodingIsTheDocumentedBytes) {
  const Bytes b = GoldenDescriptorBytes("");
  EXPECT_EQ(b.size(), 173u);
  EXPECT_EQ(CanonicalEncoding(GoldenDescriptor()).size(), b.size());
  EXPECT_EQ(b.Xxh3Hex(), kGoldenNamespace);
  EXPECT_EQ(GoldenNamespaceId().ToHex(), kGoldenNamespace);
}

TEST(GoldenTest, SaltedNamespace) {
  NamespaceDescriptor d = GoldenDescriptor();
  d.tenant_salt = "tenant-a";
  EXPECT_EQ(GoldenDescriptorBytes("tenant-a").Xxh3Hex(), kGoldenSaltedNamespace);
  EXPECT_EQ(ComputeNamespaceId(d).value().ToHex(), kGoldenSaltedNamespace);
}

TEST(GoldenTest, FirstThreeChainedKeys) {
  const std::vector<uint32_t> tokens = GoldenTokens();
  const auto keys = ChainKeys(GoldenNamespaceId(), tokens, 16);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ASSERT_EQ(keys->size(), 3u);
  Key128 parent = GoldenNamespaceId();
  for (size_t i = 0; i < 3; ++i) {
    const auto block = std::span<const uint32_t>(tokens).subspan(16 * i, 16);
    EXPECT_EQ(TokenBlockBytes(parent, block, "").Xxh3Hex(), kGoldenBlockKeys[i]) << i;
    EXPECT_EQ((*keys)[i].ToHex(), kGoldenBlockKeys[i]) << i;
    parent = (*keys)[i];
  }
}

TEST(GoldenTest, KeyWithExtraBytes) {
  const std::vector<uint32_t> tokens = GoldenTokens();
  const auto block = std::span<const uint32_t>(tokens).first(16);
  const std::string_view extra = "lora:7";
  EXPECT_EQ(TokenBlockBytes(GoldenNamespaceId(), block, extra).Xxh3Hex(), kGoldenExtraKey);
  EXPECT_EQ(ChainKey(GoldenNamespaceId(), block, std::as_bytes(std::span(extra))).ToHex(),
            kGoldenExtraKey);
}

TEST(GoldenTest, FoldedForeignKeys) {
  // Two 32-byte engine hashes (the size of vLLM's sha256 block hash): bytes 0x00..0x1f, 0x20..0x3f.
  const std::vector<std::string> hashes = {ForeignHash(0x00), ForeignHash(0x20)};
  const std::vector<BlockKey> keys = FoldForeignKeys(GoldenNamespaceId(), hashes);
  ASSERT_EQ(keys.size(), 2u);
  Key128 parent = GoldenNamespaceId();
  for (size_t i = 0; i < 2; ++i) {
    Bytes b;
    b.KeyBe(parent).U8(0x03).U32Le(32).Raw(hashes[i]);
    EXPECT_EQ(b.Xxh3Hex(), kGoldenForeignKeys[i]) << i;
    EXPECT_EQ(keys[i].ToHex(), kGoldenForeignKeys[i]) << i;
    parent = keys[i];
  }
}

// A 1024-token block (4 KiB of tokens) takes the streaming path; it must hash the same bytes.
TEST(GoldenTest, LargeBlockMatchesTheDocumentedBytes) {
  std::vector<uint32_t> tokens(1024);
  for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = i * 2654435761u;
  const std::string extra(100, 'x');
  const BlockKey key =
      ChainKey(GoldenNamespaceId(), tokens, std::as_bytes(std::span<const char>(extra)));
  EXPECT_EQ(key.ToHex(), TokenBlockBytes(GoldenNamespaceId(), tokens, extra).Xxh3Hex());
  const std::string big(5000, 'y');
  Bytes b;
  b.KeyBe(key).U8(0x03).U32Le(big.size()).Raw(big);
  EXPECT_EQ(FoldForeignKey(key, std::as_bytes(std::span<const char>(big))).ToHex(), b.Xxh3Hex());
}

// Encodings of 2047, 2048 and 2049 bytes straddle the switch from one-shot to streaming hashing.
TEST(GoldenTest, OneShotAndStreamingAgreeAtTheBoundary) {
  const std::vector<uint32_t> tokens = GoldenTokens();
  const auto block = std::span<const uint32_t>(tokens).first(16);
  for (size_t extra_len : {1957u, 1958u, 1959u}) {
    const std::string extra(extra_len, 'e');
    const Bytes b = TokenBlockBytes(GoldenNamespaceId(), block, extra);
    EXPECT_EQ(b.size(), 90 + extra_len);
    EXPECT_EQ(
        ChainKey(GoldenNamespaceId(), block, std::as_bytes(std::span<const char>(extra))).ToHex(),
        b.Xxh3Hex())
        << extra_len;
    const std::string foreign(extra_len + 90 - 21, 'f');
    Bytes f;
    f.KeyBe(GoldenNamespaceId()).U8(0x03).U32Le(foreign.size()).Raw(foreign);
    EXPECT_EQ(f.size(), 90 + extra_len);
    EXPECT_EQ(
        FoldForeignKey(GoldenNamespaceId(), std::as_bytes(std::span<const char>(foreign))).ToHex(),
        f.Xxh3Hex());
  }
}

}  // namespace
}  // namespace kvtier::hashing
