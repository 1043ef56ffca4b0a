#include "daemon/cli/replayer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "client/testing/in_process_daemon.h"

namespace kvtier::cli {
namespace {

using client::testing::InProcessDaemon;

constexpr uint64_t kBlockBytes = 4096;

TEST(TracePayloadTest, DeterministicAndDistinctPerId) {
  std::vector<std::byte> a(1001), b(1001), c(1001);
  FillTracePayload(7, a);
  FillTracePayload(7, b);
  FillTracePayload(8, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a[1000], c[1000]);  // the tail bytes too
}

TEST(TraceKeysTest, EqualIdPrefixesGiveEqualKeyPrefixes) {
  const NamespaceId ns{{1, 2}};
  const std::vector<uint64_t> x = {1, 2, 3}, y = {1, 2, 4}, z = {9, 2, 3};
  const std::vector<BlockKey> kx = TraceKeys(ns, x), ky = TraceKeys(ns, y), kz = TraceKeys(ns, z);
  EXPECT_EQ(kx[0], ky[0]);
  EXPECT_EQ(kx[1], ky[1]);
  EXPECT_NE(kx[2], ky[2]);
  // Keys name the whole prefix: a different first id changes every key after it.
  EXPECT_NE(kx[1], kz[1]);
  EXPECT_NE(kx[2], kz[2]);
  EXPECT_NE(TraceKeys(NamespaceId{{1, 3}}, x)[0], kx[0]);
}

class ReplayerTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    Result<client::Client> c = client::Client::Connect(server_.url());
    ASSERT_TRUE(c.ok());
    client_ = std::make_unique<client::Client>(std::move(c).value());
    if (GetParam()) {
      ASSERT_TRUE(client_->Attach().ok());
    }
    hashing::NamespaceDescriptor d;
    d.model_id = "replay-test";
    d.kv_dtype = "int8";
    d.num_layers = d.num_kv_heads = d.head_dim = 1;
    d.tokens_per_block = 512;
    d.layout_tag = "test";
    Result<client::NamespaceInfo> ns = client_->RegisterNamespace(d, kBlockBytes);
    ASSERT_TRUE(ns.ok());
    ns_ = ns->id;
    replayer_ = std::make_unique<Replayer>(client_.get(), ns->id,
                                           ReplayOptions{kBlockBytes, GetParam(), 512});
  }

  static TraceRequest Request(std::vector<uint64_t> ids, uint64_t tokens) {
    TraceRequest r;
    r.input_tokens = tokens;
    r.hash_ids = std::move(ids);
    return r;
  }

  InProcessDaemon server_;
  std::unique_ptr<client::Client> client_;
  NamespaceId ns_;
  std::unique_ptr<Replayer> replayer_;
};

TEST_P(ReplayerTest, SharedPrefixesHitAndMissesArePut) {
  ASSERT_TRUE(replayer_->Replay(Request({1, 2, 3}, 1536)).ok());
  ASSERT_TRUE(replayer_->Replay(Request({1, 2, 4}, 1500)).ok());
  ASSERT_TRUE(replayer_->Replay(Request({1, 2, 3}, 1100)).ok());
  const ReplayTotals& t = replayer_->totals();
  EXPECT_EQ(t.requests, 3u);
  EXPECT_EQ(t.blocks, 9u);
  EXPECT_EQ(t.served_blocks, 5u);
  EXPECT_EQ(t.served_by_tier[static_cast<int>(TierId::kHost)], 5u);
  EXPECT_EQ(t.lookup_hit_blocks, 5u);
  EXPECT_EQ(t.stored_blocks, 4u);
  EXPECT_EQ(t.corrupt_blocks, 0u);
  EXPECT_EQ(t.lost_blocks, 0u);
  EXPECT_EQ(t.hit_tokens, 1024u + 1100u);  // capped at the request's input
  EXPECT_EQ(t.request_latency.count(), 3u);
  EXPECT_EQ(t.get_latency.count(), 2u);
  EXPECT_EQ(t.put_latency.count(), 2u);
  EXPECT_EQ(server_.block_count(), 4u);
}

TEST_P(ReplayerTest, WrongBytesAreCorruptNotHits) {
  ASSERT_TRUE(replayer_->Replay(Request({10, 11}, 1024)).ok());
  // Damage the first block stored, at the arena offset the daemon gave it. Through a second,
  // attached client, since the replaying one may be inline.
  store::Store& store = server_.server().store();
  Result<store::Lease> lease = store.Acquire(ns_, TraceKeys(ns_, std::vector<uint64_t>{10})[0]);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const uint64_t offset = lease->extent.offset;
  ASSERT_TRUE(store.Release(lease->id).ok());
  Result<client::Client> writer = client::Client::Connect(server_.url());
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->Attach().ok());
  writer->arena().base()[offset + 100] ^= std::byte{0xff};
  ASSERT_TRUE(replayer_->Replay(Request({10, 11}, 1024)).ok());
  const ReplayTotals& t = replayer_->totals();
  EXPECT_EQ(t.corrupt_blocks, 1u);
  EXPECT_EQ(t.served_blocks, 0u);
  EXPECT_EQ(t.lost_blocks, 1u);  // block 11 was reported but is past the corrupt one
}

// With a hold, what a lookup found stays until the engine has read it, whatever is put meanwhile;
// without one, puts that need the room evict it (the lost_blocks of a replay without --hold-ms).
TEST_P(ReplayerTest, AHeldPrefixSurvivesPutsThatFillTheTier) {
  Replayer held(client_.get(), ns_,
                ReplayOptions{kBlockBytes, GetParam(), 512, true, std::chrono::minutes(1)});
  ASSERT_TRUE(replayer_->Replay(Request({50, 51}, 1024)).ok());
  ASSERT_TRUE(replayer_->Replay(Request({60, 61}, 1024)).ok());
  ASSERT_TRUE(held.Replay(Request({50, 51}, 1024)).ok());        // found, and held
  ASSERT_TRUE(replayer_->Replay(Request({60, 61}, 1024)).ok());  // found, not held
  ASSERT_EQ(held.totals().served_blocks, 2u);
  // New blocks worth twice the host tier (4 MiB), in requests of 64.
  for (uint64_t r = 0; r < 32; ++r) {
    std::vector<uint64_t> ids;
    for (uint64_t i = 0; i < 64; ++i) ids.push_back(1000 + r * 64 + i);
    ASSERT_TRUE(replayer_->Replay(Request(ids, 64 * 512)).ok());
  }
  ASSERT_LT(server_.block_count(), 32u * 64);  // the tier did evict
  const auto cached = [&](std::vector<uint64_t> ids) {
    Result<client::LookupResult> found = client_->Lookup(ns_, TraceKeys(ns_, ids));
    return found.ok() ? found->prefix : size_t{99};
  };
  EXPECT_EQ(cached({50, 51}), 2u);
  EXPECT_EQ(cached({60, 61}), 0u);
}

// A kvtierd older than KVT.REFRESH answers "unknown command": the replay stops with an error
// that names the command and the flag that leaves it out.
TEST_P(ReplayerTest, ADaemonWithoutRefreshIsToldAboutNoRefresh) {
  server_.faults().SetRawReply("KVT.REFRESH", "-ERR unknown command 'KVT.REFRESH'\r\n");
  const Status st = replayer_->Replay(Request({20, 21}, 1024));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("KVT.REFRESH"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("--no-refresh"), std::string::npos) << st.ToString();
}

INSTANTIATE_TEST_SUITE_P(Paths, ReplayerTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Shm" : "Inline"; });

}  // namespace
}  // namespace kvtier::cli
