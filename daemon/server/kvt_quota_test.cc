// KVT.QUOTA (an admin's quotas per tenant and tier) and what a tenant learns by probing
// another's prompts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "daemon/server/test_client.h"
#include "hashing/block_hasher.h"
#include "hashing/namespace_descriptor.h"

namespace kvtier::server {
namespace {

using resp::Reply;
using testing::PackKeys;
using testing::MapValue;
using testing::ParseReply;
using testing::TestClient;
using testing::TestServer;

constexpr uint64_t kBlockBytes = 64;  // 2 (K, V) x 2 layers x 1 head x 4 dims x 2 tokens x fp16

hashing::NamespaceDescriptor Descriptor(const std::string& salt) {
  hashing::NamespaceDescriptor d;
  d.model_id = "tiny/model";
  d.kv_dtype = "fp16";
  d.num_layers = 2;
  d.num_kv_heads = 1;
  d.head_dim = 4;
  d.tokens_per_block = 2;
  d.layout_tag = "nhd";
  d.tenant_salt = salt;
  return d;
}

std::vector<std::string> Register(const std::string& salt) {
  return {"KVT.REGISTER", "model",    "tiny/model", "dtype", "fp16", "layers", "2",
          "kv_heads",     "1",        "head_dim",   "4",     "block_tokens",   "2",
          "layout",       "nhd",      "salt",       salt};
}

std::vector<BlockKey> PromptKeys(const NamespaceId& ns, uint32_t first_token, size_t blocks) {
  std::vector<uint32_t> tokens(blocks * 2);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = first_token + static_cast<uint32_t>(i);
  return hashing::ChainKeys(ns, tokens, 2).value();
}

class KvtQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString();
    // This process runs as the daemon's user: on the Unix socket it is an admin.
    admin_ = ts_.ConnectUnix();
    tcp_ = ts_.ConnectTcp();
  }
  NamespaceId RegisterTenant(const std::string& salt) {
    EXPECT_FALSE(ParseReply(admin_.Call(Register(salt))).is_error());
    return hashing::ComputeNamespaceId(Descriptor(salt)).value();
  }
  void Put(const NamespaceId& ns, const std::vector<BlockKey>& keys) {
    std::vector<std::string> put = {"KVT.PUT", ns.ToHex(), PackKeys(keys)};
    for (size_t i = 0; i < keys.size(); ++i) put.push_back(std::string(kBlockBytes, 'k'));
    ASSERT_EQ(ParseReply(admin_.Call(put)).elements.size(), keys.size());
  }

  TestServer ts_;
  TestClient admin_;
  TestClient tcp_;
};

TEST_F(KvtQuotaTest, AnAdminSetsAQuotaAndSeesWhatTheTenantHolds) {
  EXPECT_EQ(admin_.Call({"KVT.QUOTA", "GET"}), "*0\r\n");
  EXPECT_EQ(admin_.Call({"KVT.QUOTA", "SET", "TENANT", "acme", "host", "1MiB"}), "+OK\r\n");
  const NamespaceId acme = RegisterTenant("acme");
  Put(acme, PromptKeys(acme, 100, 3));
  const Reply rules = ParseReply(admin_.Call({"KVT.QUOTA", "GET"}));
  ASSERT_EQ(rules.elements.size(), 1u) << rules.DebugString();
  EXPECT_EQ(MapValue(rules.elements[0], "subject").str, "tenant acme");
  EXPECT_EQ(MapValue(rules.elements[0], "tier").str, "host");
  EXPECT_EQ(MapValue(rules.elements[0], "quota_bytes").integer, 1 << 20);
  EXPECT_EQ(MapValue(rules.elements[0], "used_bytes").integer, 3 * static_cast<int64_t>(kBlockBytes));

  // A namespace's own rule, set after its blocks were stored, takes them over from its tenant's.
  EXPECT_EQ(admin_.Call({"KVT.QUOTA", "set", "namespace", acme.ToHex(), "HOST", "4096"}),
            "+OK\r\n");
  const Reply both = ParseReply(admin_.Call({"KVT.QUOTA", "GET"}));
  ASSERT_EQ(both.elements.size(), 2u) << both.DebugString();
  EXPECT_EQ(MapValue(both.elements[0], "used_bytes").integer, 0);
  EXPECT_EQ(MapValue(both.elements[1], "subject").str, "namespace " + acme.ToHex());
  EXPECT_EQ(MapValue(both.elements[1], "used_bytes").integer, 3 * static_cast<int64_t>(kBlockBytes));
  // Cleared, a rule drops out of the listing.
  EXPECT_EQ(admin_.Call({"KVT.QUOTA", "SET", "TENANT", "acme", "host", "0"}), "+OK\r\n");
  EXPECT_EQ(ParseReply(admin_.Call({"KVT.QUOTA", "GET"})).elements.size(), 1u);
}

TEST_F(KvtQuotaTest, OnlyAnAdminMayUseIt) {
  EXPECT_EQ(tcp_.Call({"KVT.QUOTA", "GET"}),
            "-NOPERM KVT.QUOTA is for an admin: root or the daemon's user, on the Unix socket\r\n");
  EXPECT_EQ(ParseReply(tcp_.Call({"KVT.QUOTA", "SET", "TENANT", "me", "host", "1GiB"})).str.rfind(
                "NOPERM", 0),
            0u);
  EXPECT_EQ(admin_.Call({"KVT.QUOTA", "GET"}), "*0\r\n");  // nothing was set
}

TEST_F(KvtQuotaTest, BadRequestsSayWhatIsWrongAndChangeNothing) {
  auto error = [&](std::vector<std::string> cmd) {
    const Reply r = ParseReply(admin_.Call(cmd));
    EXPECT_TRUE(r.is_error()) << r.DebugString();
    return r.str;
  };
  EXPECT_EQ(error({"KVT.QUOTA", "SET", "TENANT", "acme", "disk", "1GiB"}),
            "ERR unknown tier 'disk' (expected gpu, host or nvme)");
  EXPECT_EQ(error({"KVT.QUOTA", "SET", "TENANT", "acme", "host", "lots"}).rfind("ERR size: ", 0),
            0u);
  EXPECT_EQ(error({"KVT.QUOTA", "SET", "USER", "acme", "host", "1GiB"}),
            "ERR KVT.QUOTA SET takes TENANT or NAMESPACE");
  EXPECT_EQ(error({"KVT.QUOTA", "SET", "NAMESPACE", "xyz", "host", "1GiB"}),
            "ERR a namespace id is 32 hex digits");
  EXPECT_EQ(error({"KVT.QUOTA", "SET", "TENANT", "", "host", "1GiB"}),
            "ERR a tenant salt is not empty");
  EXPECT_EQ(error({"KVT.QUOTA", "SET", "TENANT", "acme", "host"}).rfind("ERR KVT.QUOTA SET", 0),
            0u);
  EXPECT_EQ(error({"KVT.QUOTA", "LIST"}).rfind("ERR KVT.QUOTA GET | SET", 0), 0u);
  // This server has no NVMe tier: a quota there would protect nothing.
  EXPECT_EQ(error({"KVT.QUOTA", "SET", "TENANT", "acme", "nvme", "1GiB"}).rfind("NOTFOUND", 0),
            0u);
  EXPECT_EQ(admin_.Call({"KVT.QUOTA", "GET"}), "*0\r\n");
}

// A tenant that does not know another's salt cannot name its blocks: keys chain under the
// namespace id, which hashes the salt in. Its lookups of the other's prompt, under any namespace
// it can form, answer exactly as a prompt nobody stored (docs/protocol.md has the timing argument).
TEST_F(KvtQuotaTest, ATenantProbingAnothersPromptLearnsNothing) {
  const NamespaceId victim = RegisterTenant("victim-secret");
  Put(victim, PromptKeys(victim, 100, 4));
  const NamespaceId prober = RegisterTenant("prober");
  const NamespaceId guess = hashing::ComputeNamespaceId(Descriptor("victim")).value();
  const std::string never_stored =
      tcp_.Call({"KVT.LOOKUP", prober.ToHex(), PackKeys(PromptKeys(prober, 9000, 4))});
  EXPECT_EQ(never_stored, "*2\r\n:0\r\n$0\r\n\r\n");
  // The victim's prompt, hashed under the prober's own namespace and under a guessed salt.
  EXPECT_EQ(tcp_.Call({"KVT.LOOKUP", prober.ToHex(), PackKeys(PromptKeys(prober, 100, 4))}),
            never_stored);
  EXPECT_EQ(tcp_.Call({"KVT.LOOKUP", guess.ToHex(), PackKeys(PromptKeys(guess, 100, 4))}),
            never_stored);
  // The victim's real keys, if they leaked, asked under the prober's namespace: a miss too (an
  // index entry matches only under its own namespace).
  EXPECT_EQ(tcp_.Call({"KVT.LOOKUP", prober.ToHex(), PackKeys(PromptKeys(victim, 100, 4))}),
            never_stored);
  // The owner still hits.
  EXPECT_EQ(ParseReply(tcp_.Call({"KVT.LOOKUP", victim.ToHex(),
                                  PackKeys(PromptKeys(victim, 100, 4))}))
                .elements[0]
                .integer,
            4);
}

// With a namespace's id a client can explain, read and drop its blocks: the statistics any client
// reads name namespaces by their refs, and only an admin's KVT.STATS adds the ids.
TEST_F(KvtQuotaTest, StatisticsShowNamespaceIdsOnlyToAnAdmin) {
  const NamespaceId victim = RegisterTenant("victim-secret");
  Put(victim, PromptKeys(victim, 100, 4));
  ASSERT_EQ(ParseReply(tcp_.Call({"KVT.LOOKUP", victim.ToHex(),
                                  PackKeys(PromptKeys(victim, 100, 4))}))
                .elements[0]
                .integer,
            4);
  const std::string id = victim.ToHex();
  const std::string ref = hashing::NamespaceRef(victim);
  for (const std::vector<std::string>& cmd :
       std::vector<std::vector<std::string>>{{"INFO"}, {"INFO", "kvtier"}, {"KVT.STATS"}}) {
    const std::string seen = ParseReply(tcp_.Call(cmd)).str;
    EXPECT_EQ(seen.find(id), std::string::npos) << cmd[0] << " shows the id to a TCP client";
    EXPECT_NE(seen.find(ref), std::string::npos) << cmd[0] << " does not name the namespace";
  }
  const std::string admin_view = ParseReply(admin_.Call({"KVT.STATS"})).str;
  EXPECT_NE(admin_view.find("\"id\":\"" + id + "\""), std::string::npos) << admin_view;
}

}  // namespace
}  // namespace kvtier::server
