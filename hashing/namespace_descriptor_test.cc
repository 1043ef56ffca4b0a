#include "hashing/namespace_descriptor.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

namespace kvtier::hashing {
namespace {

NamespaceDescriptor Llama8B() {
  NamespaceDescriptor d;
  d.model_id = "meta-llama/Llama-3.1-8B-Instruct";
  d.model_revision = "main";
  d.kv_dtype = "bf16";
  d.num_layers = 32;
  d.num_kv_heads = 8;
  d.head_dim = 128;
  d.tokens_per_block = 16;
  d.layout_tag = "vllm_nhd";
  return d;
}

// Expects Validate() to fail with kInvalidArgument and a message that starts with `field`.
void ExpectRejected(const NamespaceDescriptor& d, const std::string& field) {
  const Status st = Validate(d);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << field;
  EXPECT_EQ(st.message().rfind(field + ":", 0), 0u) << st.message();
  EXPECT_EQ(ComputeNamespaceId(d).status(), st);
  EXPECT_EQ(BlockBytes(d), 0u);
}

TEST(NamespaceDescriptorTest, DefaultsAreTheCurrentSchemeAndOneRank) {
  NamespaceDescriptor d;
  EXPECT_EQ(d.hash_scheme_version, kCurrentHashSchemeVersion);
  EXPECT_EQ(d.tp_size, 1u);
  EXPECT_EQ(d.tp_rank, 0u);
  EXPECT_TRUE(Validate(Llama8B()).ok());
}

TEST(NamespaceDescriptorTest, ValidationNamesTheField) {
  const NamespaceDescriptor good = Llama8B();
  auto with = [&](std::function<void(NamespaceDescriptor&)> change) {
    NamespaceDescriptor d = good;
    change(d);
    return d;
  };
  ExpectRejected(with([](auto& d) { d.model_id.clear(); }), "model_id");
  ExpectRejected(with([](auto& d) { d.model_id.assign(5000, 'm'); }), "model_id");
  ExpectRejected(with([](auto& d) { d.model_revision.assign(5000, 'r'); }), "model_revision");
  ExpectRejected(with([](auto& d) { d.kv_dtype = "float17"; }), "kv_dtype");
  ExpectRejected(with([](auto& d) { d.kv_dtype = "BF16"; }), "kv_dtype");
  ExpectRejected(with([](auto& d) { d.kv_dtype.clear(); }), "kv_dtype");
  ExpectRejected(with([](auto& d) { d.num_layers = 0; }), "num_layers");
  ExpectRejected(with([](auto& d) { d.num_layers = 1025; }), "num_layers");
  ExpectRejected(with([](auto& d) { d.num_kv_heads = 0; }), "num_kv_heads");
  ExpectRejected(with([](auto& d) { d.num_kv_heads = 1025; }), "num_kv_heads");
  ExpectRejected(with([](auto& d) { d.head_dim = 0; }), "head_dim");
  ExpectRejected(with([](auto& d) { d.head_dim = 4097; }), "head_dim");
  ExpectRejected(with([](auto& d) { d.tokens_per_block = 0; }), "tokens_per_block");
  ExpectRejected(with([](auto& d) { d.tokens_per_block = 65537; }), "tokens_per_block");
  ExpectRejected(with([](auto& d) { d.layout_tag.clear(); }), "layout_tag");
  ExpectRejected(with([](auto& d) { d.tp_size = 0; }), "tp_size");
  ExpectRejected(with([](auto& d) { d.tp_size = 1025; }), "tp_size");
  ExpectRejected(with([](auto& d) { d.tp_rank = 1; }), "tp_rank");
  ExpectRejected(with([](auto& d) { d.tp_size = 4, d.tp_rank = 4; }), "tp_rank");
  ExpectRejected(with([](auto& d) { d.hash_scheme_version = 0; }), "hash_scheme_version");
  ExpectRejected(with([](auto& d) { d.hash_scheme_version = 2; }), "hash_scheme_version");
  ExpectRejected(with([](auto& d) { d.tenant_salt.assign(5000, 's'); }), "tenant_salt");
}

// A model id that is not UTF-8 became a namespace label that /stats could not render as JSON.
TEST(NamespaceDescriptorTest, TextFieldsMustBeUtf8ButTheSaltMayBeAnyBytes) {
  const std::string invalid[] = {"model\xFF", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                                 "cut\xE2\x82"};
  for (const std::string& bad : invalid) {
    NamespaceDescriptor d = Llama8B();
    d.model_id = bad;
    ExpectRejected(d, "model_id");
    EXPECT_EQ(Validate(d).message(), "model_id: not valid UTF-8");
    d = Llama8B();
    d.model_revision = bad;
    ExpectRejected(d, "model_revision");
    d = Llama8B();
    d.layout_tag = bad;
    ExpectRejected(d, "layout_tag");
  }
  NamespaceDescriptor d = Llama8B();
  d.model_id = "mod\xC3\xA8le/\xE6\xA8\xA1\xE5\x9E\x8B-\xF0\x9F\xA6\x99";  // modèle/模型-🦙
  d.tenant_salt = std::string("\xFF\x00\xC0\xAF", 4);
  EXPECT_TRUE(Validate(d).ok()) << Validate(d).ToString();
}

TEST(NamespaceDescriptorTest, LimitsThemselvesAreAccepted) {
  NamespaceDescriptor d = Llama8B();
  d.num_layers = kMaxLayers;
  d.num_kv_heads = kMaxKvHeads;
  d.head_dim = kMaxHeadDim;
  d.tokens_per_block = kMaxTokensPerBlock;
  d.kv_dtype = "fp32";
  d.tp_size = kMaxTpSize;
  d.tp_rank = kMaxTpSize - 1;
  EXPECT_TRUE(Validate(d).ok());
  EXPECT_EQ(BlockBytes(d), uint64_t{2} << 50);  // 2 * 2^10 * 2^10 * 2^12 * 2^16 * 4
}

TEST(NamespaceDescriptorTest, BlockBytesMatchesTheDesignTable) {
  EXPECT_EQ(BlockBytes(Llama8B()), 2u << 20);  // 2 MiB per 16-token block
  NamespaceDescriptor gpt2 = Llama8B();
  gpt2.model_id = "gpt2";
  gpt2.kv_dtype = "fp32";
  gpt2.num_layers = 12;
  gpt2.num_kv_heads = 12;
  gpt2.head_dim = 64;
  EXPECT_EQ(BlockBytes(gpt2), 1179648u);  // 72 KiB per token x 16
  EXPECT_EQ(BytesPerElement("fp8_e4m3"), 1u);
  EXPECT_EQ(BytesPerElement("fp16"), 2u);
  EXPECT_EQ(BytesPerElement("nope"), 0u);
}

TEST(NamespaceDescriptorTest, EveryFieldChangesTheId) {
  const NamespaceDescriptor base = [] {
    NamespaceDescriptor d = Llama8B();
    d.tp_size = 2;
    return d;
  }();
  std::vector<std::function<void(NamespaceDescriptor&)>> changes = {
      [](auto& d) { d.model_id += "x"; },
      [](auto& d) { d.model_revision = "other"; },
      [](auto& d) { d.kv_dtype = "fp16"; },
      [](auto& d) { d.num_layers += 1; },
      [](auto& d) { d.num_kv_heads += 1; },
      [](auto& d) { d.head_dim += 1; },
      [](auto& d) { d.tokens_per_block += 1; },
      [](auto& d) { d.layout_tag = "vllm_hnd"; },
      [](auto& d) { d.tp_rank = 1; },
      [](auto& d) { d.tp_size = 4; },
      [](auto& d) { d.tenant_salt = "tenant-a"; },
  };
  std::set<Key128> ids = {ComputeNamespaceId(base).value()};
  std::set<std::string> encodings = {CanonicalEncoding(base)};
  for (size_t i = 0; i < changes.size(); ++i) {
    NamespaceDescriptor d = base;
    changes[i](d);
    const auto id = ComputeNamespaceId(d);
    ASSERT_TRUE(id.ok()) << i << ": " << id.status().ToString();
    EXPECT_TRUE(ids.insert(*id).second) << "change " << i << " kept the id";
    EXPECT_TRUE(encodings.insert(CanonicalEncoding(d)).second) << i;
  }
  // hash_scheme_version has only one supported value, so its effect is seen in the encoding.
  NamespaceDescriptor v2 = base;
  v2.hash_scheme_version = 2;
  EXPECT_TRUE(encodings.insert(CanonicalEncoding(v2)).second);
}

TEST(NamespaceDescriptorTest, LengthPrefixesKeepFieldBoundaries) {
  // Moving bytes between adjacent strings must not give the same encoding.
  NamespaceDescriptor a = Llama8B();
  NamespaceDescriptor b = Llama8B();
  a.model_id = "org/model";
  a.model_revision = "v1";
  b.model_id = "org/modelv";
  b.model_revision = "1";
  EXPECT_NE(CanonicalEncoding(a), CanonicalEncoding(b));
  EXPECT_NE(ComputeNamespaceId(a).value(), ComputeNamespaceId(b).value());
  // An empty salt and a salt of one NUL byte are different tenants.
  b = a;
  b.tenant_salt = std::string(1, '\0');
  EXPECT_NE(ComputeNamespaceId(a).value(), ComputeNamespaceId(b).value());
}

TEST(NamespaceDescriptorTest, EncodingStartsWithMagicAndIsDeterministic) {
  const std::string enc = CanonicalEncoding(Llama8B());
  EXPECT_EQ(enc.substr(0, 9), "kvtier-ns");
  EXPECT_EQ(enc, CanonicalEncoding(Llama8B()));
  EXPECT_EQ(ComputeNamespaceId(Llama8B()).value(), ComputeNamespaceId(Llama8B()).value());
}

// The statistics' name for a namespace: stable (dashboards and alerts key on it, on every node)
// and not the id (a capability).
TEST(NamespaceDescriptorTest, TheRefTellsNamespacesApartWithoutShowingTheirIds) {
  const NamespaceId id = ComputeNamespaceId(Llama8B()).value();
  const std::string ref = NamespaceRef(id);
  ASSERT_EQ(ref.size(), 16u);
  EXPECT_EQ(ref.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(ref, NamespaceRef(id));
  const std::string hex = id.ToHex();
  EXPECT_EQ(hex.find(ref), std::string::npos);
  EXPECT_EQ(ref.find(hex.substr(0, 8)), std::string::npos);
  EXPECT_EQ(ref.find(hex.substr(24, 8)), std::string::npos);
  NamespaceDescriptor other = Llama8B();
  other.tenant_salt = "another tenant";
  EXPECT_NE(NamespaceRef(ComputeNamespaceId(other).value()), ref);
  // Pinned: the names in operators' dashboards must not change between versions.
  EXPECT_EQ(NamespaceRef(NamespaceId{{0x0123456789abcdefULL, 0xfedcba9876543210ULL}}),
            "6881ad4c8c3ccd57");
}

}  // namespace
}  // namespace kvtier::hashing
