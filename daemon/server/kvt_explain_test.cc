// KVT.EXPLAIN: each reason a block can be present or missing, over a host tier above a fake NVMe
// tier, and the other-namespace check with what it must not reveal.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "daemon/index/eviction_policy.h"
#include "daemon/server/test_client.h"
#include "hashing/block_hasher.h"
#include "hashing/namespace_descriptor.h"
#include "tests/fakes/fake_tier.h"

namespace kvtier::server {
namespace {

using resp::Reply;
using testing::PackKeys;
using testing::ParseReply;
using testing::TestClient;
using testing::TestServer;

// 2 (K, V) x 2 layers x 1 kv head x 4 head dim x 2 tokens x 2 bytes (fp16).
constexpr uint64_t kBlockBytes = 64;
constexpr uint64_t kNvmeBlocks = 4;

std::vector<std::string> Fields(const std::string& layout = "nhd", const std::string& salt = "",
                                const std::string& block_tokens = "2") {
  return {"model",    "tiny/model", "dtype",    "fp16", "layers",       "2",
          "kv_heads", "1",          "head_dim", "4",    "block_tokens", block_tokens,
          "layout",   layout,       "salt",     salt};
}

NamespaceId IdOf(const std::vector<std::string>& fields) {
  hashing::NamespaceDescriptor d;
  d.model_id = "tiny/model";
  d.kv_dtype = "fp16";
  d.num_layers = 2;
  d.num_kv_heads = 1;
  d.head_dim = 4;
  d.tokens_per_block = static_cast<uint32_t>(std::stoul(fields[11]));
  d.layout_tag = fields[13];
  d.tenant_salt = fields[15];
  return hashing::ComputeNamespaceId(d).value();
}

std::vector<uint32_t> Tokens(size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(1000 + i);
  return t;
}

std::string PackTokens(const std::vector<uint32_t>& tokens) {
  std::string out;
  for (uint32_t t : tokens) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((t >> (8 * b)) & 0xff));
  }
  return out;
}

const Reply& Get(const Reply& map, std::string_view name) { return testing::MapValue(map, name); }

class KvtExplainTest : public ::testing::Test {
 protected:
  KvtExplainTest() {
    auto nvme =
        std::make_unique<kvtier::testing::FakeTier>(TierId::kNvme, kNvmeBlocks * kBlockBytes,
                                                    /*addressable=*/false);
    nvme_ = nvme.get();
    ts_ = std::make_unique<TestServer>(ServerOptions{}, store::StoreOptions{}, std::move(nvme));
  }
  void SetUp() override {
    ASSERT_TRUE(ts_->status().ok()) << ts_->status().ToString();
    c_ = ts_->ConnectTcp();
    Register(Fields());
  }
  // Registers a namespace; returns its id.
  NamespaceId Register(const std::vector<std::string>& fields) {
    std::vector<std::string> cmd = {"KVT.REGISTER"};
    cmd.insert(cmd.end(), fields.begin(), fields.end());
    const Reply r = ParseReply(c_.Call(cmd));
    EXPECT_EQ(Get(r, "ns").str, IdOf(fields).ToHex()) << r.DebugString();
    return IdOf(fields);
  }
  std::vector<BlockKey> Keys(const NamespaceId& ns, size_t tokens, uint32_t per_block = 2) {
    return hashing::ChainKeys(ns, Tokens(tokens), per_block).value();
  }
  // Stores the first `blocks` blocks of the test prompt under `ns`.
  void Put(const NamespaceId& ns, size_t blocks, uint32_t per_block = 2) {
    const std::vector<BlockKey> keys = Keys(ns, blocks * per_block, per_block);
    std::vector<std::string> put = {"KVT.PUT", ns.ToHex(), PackKeys(keys)};
    for (size_t i = 0; i < keys.size(); ++i) {
      put.push_back(std::string(kBlockBytes * per_block / 2, static_cast<char>('a' + i)));
    }
    ASSERT_EQ(ParseReply(c_.Call(put)).elements.size(), keys.size());
  }
  // KVT.EXPLAIN of the first `tokens` tokens of the test prompt under `ns`: the blocks.
  std::vector<Reply> Explain(const NamespaceId& ns, size_t tokens,
                             const std::vector<std::string>& fields = {}) {
    std::vector<std::string> cmd = {"KVT.EXPLAIN", ns.ToHex(), "TOKENS",
                                    PackTokens(Tokens(tokens))};
    cmd.insert(cmd.end(), fields.begin(), fields.end());
    reply_ = ParseReply(c_.Call(cmd));
    EXPECT_FALSE(reply_.is_error()) << reply_.DebugString();
    return Get(reply_, "blocks").elements;
  }

  kvtier::testing::FakeTier* nvme_ = nullptr;
  std::unique_ptr<TestServer> ts_;
  TestClient c_;
  Reply reply_;
  const NamespaceId ns_ = IdOf(Fields());
};

TEST_F(KvtExplainTest, PresentBlocksNameTheirTierAndUnknownOnesWereNeverStored) {
  Put(ns_, 2);
  // The least recently used block goes down to NVMe.
  ASSERT_EQ(ts_->store().EvictToTarget(TierId::kHost, 0, 1), 1u);
  const std::vector<Reply> blocks = Explain(ns_, 9);  // 4 full blocks; the 9th token is ignored
  ASSERT_EQ(blocks.size(), 4u);
  EXPECT_EQ(Get(blocks[0], "key").str, Keys(ns_, 2)[0].ToHex());
  EXPECT_EQ(Get(blocks[0], "state").str, "present");
  EXPECT_EQ(Get(blocks[0], "tier").str, "nvme");
  EXPECT_EQ(Get(blocks[1], "state").str, "present");
  EXPECT_EQ(Get(blocks[1], "tier").str, "host");
  for (size_t i : {2, 3}) {
    EXPECT_EQ(Get(blocks[i], "state").str, "missing");
    EXPECT_EQ(Get(blocks[i], "reason").str, "never_stored");
    EXPECT_TRUE(Get(blocks[i], "elsewhere").is_null());
  }
  EXPECT_EQ(Get(reply_, "registered").integer, 1);
  EXPECT_EQ(Get(reply_, "policy").str, index::kDefaultEvictionPolicy);
  EXPECT_EQ(Get(reply_, "log_entries").integer, 65536);
  EXPECT_EQ(Get(reply_, "log_recorded").integer, 0);
}

TEST_F(KvtExplainTest, AnEvictedBlockNamesItsTierPolicyCauseAndPressure) {
  Put(ns_, 4);
  ASSERT_EQ(ts_->store().EvictToTarget(TierId::kHost, 0, 4), 4u);  // all four to NVMe, now full
  ts_->clock().AdvanceMicros(5'000'000);
  ASSERT_EQ(ts_->store().EvictToTarget(TierId::kNvme, 0, 1), 1u);  // the last tier drops one
  ts_->clock().AdvanceMicros(2'000'000);
  const std::vector<Reply> blocks = Explain(ns_, 8);
  ASSERT_EQ(blocks.size(), 4u);
  // Demoted in the order 0..3, so block 0 is NVMe's least recently used.
  const Reply& b = blocks[0];
  EXPECT_EQ(Get(b, "state").str, "missing");
  EXPECT_EQ(Get(b, "reason").str, "evicted");
  EXPECT_EQ(Get(b, "tier").str, "nvme");
  EXPECT_EQ(Get(b, "age_us").integer, 2'000'000);
  EXPECT_EQ(Get(b, "policy").str, index::kDefaultEvictionPolicy);
  EXPECT_EQ(Get(b, "cause").str, "last_tier");
  EXPECT_EQ(Get(b, "tier_used_bytes").integer, static_cast<int64_t>(kNvmeBlocks * kBlockBytes));
  EXPECT_EQ(Get(b, "tier_capacity_bytes").integer, static_cast<int64_t>(kNvmeBlocks * kBlockBytes));
  EXPECT_EQ(Get(blocks[1], "state").str, "present");
  EXPECT_EQ(Get(reply_, "log_recorded").integer, 1);
}

TEST_F(KvtExplainTest, ABlockThatFailedItsChecksumIsReportedCorrupt) {
  Put(ns_, 1);
  ASSERT_EQ(ts_->store().EvictToTarget(TierId::kHost, 0, 1), 1u);
  nvme_->FlipByte(0);  // the block is the only one on NVMe, at offset 0
  const std::string key = PackKeys({Keys(ns_, 2)[0]});
  EXPECT_TRUE(ParseReply(c_.Call({"KVT.GET", ns_.ToHex(), key})).elements.at(0).is_null());
  const std::vector<Reply> blocks = Explain(ns_, 2);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(Get(blocks[0], "reason").str, "corrupt");
  EXPECT_EQ(Get(blocks[0], "tier").str, "nvme");
  EXPECT_TRUE(Get(blocks[0], "cause").is_null());
}

TEST_F(KvtExplainTest, RemovedBlocksAndDroppedNamespacesAreTold) {
  Put(ns_, 2);
  const std::vector<BlockKey> keys = Keys(ns_, 4);
  ASSERT_EQ(c_.Call({"KVT.DEL", ns_.ToHex(), PackKeys({keys[1]})}), ":1\r\n");
  std::vector<Reply> blocks = Explain(ns_, 4);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(Get(blocks[0], "state").str, "present");
  EXPECT_EQ(Get(blocks[1], "reason").str, "removed");
  EXPECT_EQ(Get(blocks[1], "tier").str, "host");

  ASSERT_EQ(c_.Call({"KVT.DROP", ns_.ToHex()}), ":1\r\n");
  // Unregistered now: tokens need the namespace's fields, keys do not.
  const Reply refused =
      ParseReply(c_.Call({"KVT.EXPLAIN", ns_.ToHex(), "TOKENS", PackTokens(Tokens(4))}));
  EXPECT_EQ(refused.str.rfind("NOTFOUND", 0), 0u) << refused.DebugString();
  blocks = Explain(ns_, 4, Fields());
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(Get(reply_, "registered").integer, 0);
  EXPECT_EQ(Get(blocks[0], "reason").str, "namespace_dropped");
  EXPECT_EQ(Get(blocks[1], "reason").str, "removed");
  const Reply by_keys = ParseReply(c_.Call({"KVT.EXPLAIN", ns_.ToHex(), "KEYS", PackKeys(keys)}));
  EXPECT_EQ(Get(Get(by_keys, "blocks").elements.at(0), "reason").str, "namespace_dropped");
}

TEST_F(KvtExplainTest, ANamespaceThatDiffersInOneFieldIsNamedButNeverOneWithAnotherSalt) {
  const NamespaceId hnd = Register(Fields("hnd"));
  const NamespaceId salted = Register(Fields("nhd", "tenant-b"));
  const NamespaceId both = Register(Fields("hnd", "", "4"));  // two fields differ: not named
  Put(hnd, 1);
  Put(salted, 3);
  Put(both, 2, 4);
  const std::vector<Reply> blocks = Explain(ns_, 6);
  ASSERT_EQ(blocks.size(), 3u);
  const Reply& b = blocks[0];
  EXPECT_EQ(Get(b, "state").str, "missing");
  EXPECT_EQ(Get(b, "reason").str, "other_namespace");
  const std::vector<Reply>& elsewhere = Get(b, "elsewhere").elements;
  ASSERT_EQ(elsewhere.size(), 1u) << b.DebugString();
  EXPECT_EQ(Get(elsewhere[0], "field").str, "layout");
  EXPECT_EQ(Get(elsewhere[0], "value").str, "hnd");
  // This TCP client gave no fields and is no admin: the other namespace by its ref, since its
  // id would let the asker read and drop its blocks.
  EXPECT_EQ(Get(elsewhere[0], "ref").str, hashing::NamespaceRef(hnd));
  EXPECT_TRUE(Get(elsewhere[0], "ns").is_null());
  EXPECT_EQ(Get(elsewhere[0], "tier").str, "host");
  // With the fields (the salt among them) the asker could compute the id: it is named.
  const std::vector<Reply> with_fields = Explain(ns_, 6, Fields());
  EXPECT_EQ(Get(Get(with_fields[0], "elsewhere").elements.at(0), "ns").str, hnd.ToHex());
  // Blocks 1 and 2 are held only under another tenant's salt: that is not revealed.
  for (size_t i : {1, 2}) {
    EXPECT_EQ(Get(blocks[i], "reason").str, "never_stored") << blocks[i].DebugString();
    EXPECT_TRUE(Get(blocks[i], "elsewhere").is_null());
  }
  // The salted tenant asking about its own namespace gets no word of the unsalted ones either.
  const std::vector<Reply> salted_view = Explain(salted, 8);
  ASSERT_EQ(salted_view.size(), 4u);
  EXPECT_EQ(Get(salted_view[0], "state").str, "present");
  EXPECT_EQ(Get(salted_view[3], "reason").str, "never_stored");
}

TEST_F(KvtExplainTest, ANamespaceWithAnotherBlockSizeCoversTheBlocksItsTokensSpan) {
  const NamespaceId wide = Register(Fields("nhd", "", "4"));
  Put(wide, 1, 4);  // tokens 0..3: blocks 0 and 1 of the asked namespace
  const std::vector<Reply> blocks = Explain(ns_, 6);
  ASSERT_EQ(blocks.size(), 3u);
  for (size_t i : {0, 1}) {
    const std::vector<Reply>& elsewhere = Get(blocks[i], "elsewhere").elements;
    ASSERT_EQ(elsewhere.size(), 1u) << blocks[i].DebugString();
    EXPECT_EQ(Get(elsewhere[0], "field").str, "block_tokens");
    EXPECT_EQ(Get(elsewhere[0], "value").str, "4");
  }
  EXPECT_EQ(Get(blocks[2], "reason").str, "never_stored");
}

TEST_F(KvtExplainTest, ExplainingTouchesNothing) {
  Put(ns_, 2);
  (void)Explain(ns_, 4);
  // Block 0 was put first and stays the least recently used: EXPLAIN did not touch it.
  ASSERT_EQ(ts_->store().EvictToTarget(TierId::kHost, 0, 1), 1u);
  const std::vector<Reply> blocks = Explain(ns_, 4);
  EXPECT_EQ(Get(blocks[0], "tier").str, "nvme");
  EXPECT_EQ(Get(blocks[1], "tier").str, "host");
}

TEST_F(KvtExplainTest, BadRequestsAreRefused) {
  auto error = [&](std::vector<std::string> cmd) {
    const Reply r = ParseReply(c_.Call(cmd));
    EXPECT_TRUE(r.is_error()) << r.DebugString();
    return r.str;
  };
  EXPECT_NE(error({"KVT.EXPLAIN", ns_.ToHex(), "WORDS", ""}).find("KEYS or TOKENS"),
            std::string::npos);
  EXPECT_NE(error({"KVT.EXPLAIN", ns_.ToHex(), "TOKENS", "abc"}).find("multiple of 4"),
            std::string::npos);
  EXPECT_NE(error({"KVT.EXPLAIN", ns_.ToHex(), "KEYS", "short"}).find("multiple of 16"),
            std::string::npos);
  EXPECT_NE(error({"KVT.EXPLAIN", "xyz", "KEYS", ""}).find("invalid namespace"), std::string::npos);
  std::vector<std::string> other = {"KVT.EXPLAIN", ns_.ToHex(), "TOKENS", ""};
  for (const std::string& f : Fields("hnd")) other.push_back(f);
  EXPECT_NE(error(other).find("another namespace"), std::string::npos);
  std::vector<std::string> bad_field = {"KVT.EXPLAIN", ns_.ToHex(), "TOKENS", "", "layers", "x"};
  EXPECT_NE(error(bad_field).find("layers"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::server
