// The inline read paths with a GPU tier (a FakeGpuTier, no host address like the device pool):
// inline reads never make a block a promotion candidate (their reader would get it through a
// device-to-host copy); a block the mover promoted after reads by a pool client answers
// KVT.LOOKUP with tier digit 0, and KVT.GET, GET and MGET serve its bytes through the store's
// ReadLeased (staged once per reply, never sent from a slot). INFO and KVT.STATS show the GPU
// tier like the others.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "daemon/server/generic_keyspace.h"
#include "daemon/server/test_client.h"

namespace kvtier::server {
namespace {

using testing::Bulk;
using testing::PackKeys;
using testing::TestClient;
using testing::TestKey;
using testing::TestServer;
using testing::Value;

constexpr size_t kBlockBytes = 64;

class GpuTierCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString();
    ASSERT_NE(ts_.gpu(), nullptr);
    c_ = ts_.ConnectUnix();
    const std::string reply =
        c_.Call({"KVT.REGISTER", "model", "tiny/gpu", "dtype", "fp16", "layers", "2", "kv_heads",
                 "1", "head_dim", "4", "block_tokens", "2", "layout", "nhd"});
    ASSERT_EQ(reply.substr(0, 4), "*4\r\n") << reply;
    // "*4 $2 ns $32 <hex>": the namespace id is the second bulk string.
    const size_t at = reply.find("$32\r\n");
    ASSERT_NE(at, std::string::npos) << reply;
    ns_ = reply.substr(at + 5, 32);
  }

  NamespaceId Ns() const { return NamespaceId{*Key128::FromHex(ns_)}; }
  BlockKey GenericBlock(std::string_view key) const {
    return GenericKey(GenericNamespaceId(), key);
  }

  // Reads twice through `read`, which leaves the block where it is; then twice as a client that
  // attached the GPU pool would, and runs the GPU mover as kvtierd's thread would.
  void ReadAndPromote(const std::vector<std::string>& read, const std::string& expected,
                      const NamespaceId& ns, const BlockKey& key) {
    for (int i = 0; i < 2; ++i) ASSERT_EQ(c_.Call(read), expected);
    ASSERT_EQ(ts_.store().PromoteCandidates(16), 0u);
    for (int i = 0; i < 2; ++i) {
      Result<store::Lease> lease = ts_.store().Acquire(ns, key, store::Store::Reader::kGpuPool);
      ASSERT_TRUE(lease.ok()) << lease.status().ToString();
      ASSERT_TRUE(ts_.store().Release(lease->id).ok());
    }
    ASSERT_EQ(ts_.store().PromoteCandidates(16), 1u);
  }

  TestServer ts_{{},
                 /*with_arena=*/true,
                 /*capacity_bytes=*/uint64_t{512} << 20,
                 /*gpu_pool_bytes=*/uint64_t{64} << 20};
  TestClient c_;
  std::string ns_;
};

TEST_F(GpuTierCommandsTest, APromotedBlockIsInTierZeroAndKvtGetServesItsBytes) {
  const std::string block(kBlockBytes, 'g');
  const std::string other(kBlockBytes, 'h');
  const std::string keys = PackKeys({TestKey(0), TestKey(1)});
  ASSERT_EQ(c_.Call({"KVT.PUT", ns_, keys, block, other}), "*2\r\n+OK\r\n+OK\r\n");
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys}), "*2\r\n:2\r\n" + Bulk("11"));
  const std::string first = PackKeys({TestKey(0)});
  ReadAndPromote({"KVT.GET", ns_, first}, "*1\r\n" + Bulk(block), Ns(), TestKey(0));
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys}), "*2\r\n:2\r\n" + Bulk("01"));
  EXPECT_EQ(c_.Call({"KVT.GET", ns_, keys}), "*2\r\n" + Bulk(block) + Bulk(other));
  EXPECT_EQ(ts_.gpu()->Stats().block_count, 1u);
  EXPECT_TRUE(ts_.WaitForLeases(0));
}

TEST_F(GpuTierCommandsTest, GetAndMgetServeLargeValuesFromTheGpu) {
  const std::string big = Value(3 << 20, 'a');  // past the size sent straight from a slot
  ASSERT_EQ(c_.Call({"SET", "big", big}), "+OK\r\n");
  ASSERT_EQ(c_.Call({"SET", "small", "s"}), "+OK\r\n");
  ReadAndPromote({"GET", "big"}, Bulk(big), GenericNamespaceId(), GenericBlock("big"));
  EXPECT_EQ(ts_.gpu()->Stats().block_count, 1u);
  EXPECT_EQ(c_.Call({"GET", "big"}), Bulk(big));
  EXPECT_EQ(c_.Call({"MGET", "small", "big", "missing"}),
            "*3\r\n" + Bulk("s") + Bulk(big) + "$-1\r\n");
  EXPECT_TRUE(ts_.WaitForLeases(0));
  // A new value replaces the one on the GPU.
  ASSERT_EQ(c_.Call({"SET", "big", "new"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"GET", "big"}), Bulk("new"));
  EXPECT_EQ(ts_.gpu()->Stats().block_count, 0u);
}

TEST_F(GpuTierCommandsTest, ADeviceErrorOnAGpuReadIsAnErrorReplyNotWrongBytes) {
  const std::string block(kBlockBytes, 'e');
  const std::string key = PackKeys({TestKey(5)});
  ASSERT_EQ(c_.Call({"KVT.PUT", ns_, key, block}), "*1\r\n+OK\r\n");
  ReadAndPromote({"KVT.GET", ns_, key}, "*1\r\n" + Bulk(block), Ns(), TestKey(5));
  static_cast<tiers::FakeGpuTier*>(ts_.gpu())->FailNextCopies(1);
  EXPECT_EQ(c_.Call({"KVT.GET", ns_, key}), "*1\r\n$-1\r\n");
  EXPECT_EQ(c_.Call({"KVT.GET", ns_, key}), "*1\r\n" + Bulk(block));  // the block stays
  EXPECT_TRUE(ts_.WaitForLeases(0));
}

TEST_F(GpuTierCommandsTest, InfoAndStatsShowTheGpuTier) {
  const std::string key = PackKeys({TestKey(7)});
  ASSERT_EQ(c_.Call({"KVT.PUT", ns_, key, std::string(kBlockBytes, 'i')}), "*1\r\n+OK\r\n");
  ReadAndPromote({"KVT.GET", ns_, key}, "*1\r\n" + Bulk(std::string(kBlockBytes, 'i')), Ns(),
                 TestKey(7));
  const std::string info = c_.Call({"INFO"});
  EXPECT_NE(info.find("tier_gpu_blocks:1\r\n"), std::string::npos) << info;
  EXPECT_NE(info.find("tier_gpu_capacity_bytes:67108864\r\n"), std::string::npos) << info;
  EXPECT_NE(info.find("tier_host_promotions:1\r\n"), std::string::npos) << info;
  EXPECT_NE(info.find("tier_gpu_copy_errors:0\r\n"), std::string::npos) << info;
  const std::string stats = c_.Call({"KVT.STATS"});
  EXPECT_NE(stats.find("\"tier\":\"gpu\""), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"gpu_candidates\":1"), std::string::npos) << stats;
}

}  // namespace
}  // namespace kvtier::server
