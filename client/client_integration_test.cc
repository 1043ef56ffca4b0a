// The client against a real kvtierd: the binary named by KVTIERD_PATH, started once for the suite
// on a scratch Unix socket with a 64 MiB host tier and no TCP or HTTP listener, and stopped with
// SIGTERM at the end.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "client/async_client.h"
#include "client/client.h"
#include "client/kvtier_c.h"
#include "client/testing/spawned_kvtierd.h"


namespace kvtier::client {
namespace {

constexpr uint64_t kBlockBytes = 64 << 10;

class DaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { daemon_.Start(KVTIERD_PATH, "client-it"); }
  static void TearDownTestSuite() { daemon_.Stop(); }

  void SetUp() override {
    Result<Client> client = Client::Connect(daemon_.url());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::make_unique<Client>(std::move(client).value());
    Result<NamespaceInfo> ns = testing::RegisterTestNamespace(*client_, "integration", kBlockBytes);
    ASSERT_TRUE(ns.ok()) << ns.status().ToString();
    ns_ = *ns;
  }

  std::vector<BlockKey> Keys(size_t n, uint32_t seed) { return testing::TestKeys(ns_, n, seed); }

  static std::vector<std::byte> Payload(size_t i) {
    std::vector<std::byte> p(kBlockBytes);
    for (size_t j = 0; j < p.size(); ++j) p[j] = static_cast<std::byte>((i * 31 + j * 7) & 0xff);
    return p;
  }

  static inline testing::SpawnedKvtierd daemon_;
  std::unique_ptr<Client> client_;
  NamespaceInfo ns_;
};

TEST_F(DaemonTest, GenericSetGet) {
  ASSERT_TRUE(client_->Set("it-key", "it-value").ok());
  EXPECT_EQ(*client_->Get("it-key"), "it-value");
  EXPECT_EQ(client_->Get("it-absent").status().code(), StatusCode::kNotFound);
}

TEST_F(DaemonTest, InlinePutLookupGet) {
  const std::vector<BlockKey> keys = Keys(4, 1);
  std::vector<std::vector<std::byte>> payloads = {Payload(0), Payload(1), Payload(2)};
  std::vector<std::span<const std::byte>> spans(payloads.begin(), payloads.end());
  Result<std::vector<Status>> put = client_->PutInline(ns_.id, std::span(keys).first(3), spans);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (const Status& s : *put) EXPECT_TRUE(s.ok()) << s.ToString();
  Result<LookupResult> lookup = client_->Lookup(ns_.id, keys);
  ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
  EXPECT_EQ(lookup->prefix, 3u);
  Result<std::vector<std::string>> got = client_->GetInline(ns_.id, keys);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(0, std::memcmp((*got)[i].data(), payloads[i].data(), kBlockBytes)) << i;
  }
  Result<std::vector<Status>> again = client_->PutInline(ns_.id, std::span(keys).first(1),
                                                         std::span(spans).first(1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].code(), StatusCode::kAlreadyExists);
}

TEST_F(DaemonTest, SharedMemoryPutGet) {
  Result<ArenaInfo> arena = client_->Attach();
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  const std::vector<BlockKey> keys = Keys(3, 2);
  std::vector<std::vector<std::byte>> payloads = {Payload(3), Payload(4)};
  const void* src[] = {payloads[0].data(), payloads[1].data()};
  Result<std::vector<Status>> put = client_->Put(ns_.id, std::span(keys).first(2), src, kBlockBytes);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (const Status& s : *put) EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<std::vector<std::byte>> out(3, std::vector<std::byte>(kBlockBytes));
  void* dst[] = {out[0].data(), out[1].data(), out[2].data()};
  Result<size_t> served = client_->Get(ns_.id, keys, dst, kBlockBytes);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(*served, 2u);
  EXPECT_EQ(out[0], payloads[0]);
  EXPECT_EQ(out[1], payloads[1]);
  // A block put through shared memory reads back inline too.
  Result<std::vector<std::string>> inline_copy = client_->GetInline(ns_.id, std::span(keys).first(1));
  ASSERT_TRUE(inline_copy.ok());
  ASSERT_EQ(inline_copy->size(), 1u);
  EXPECT_EQ(0, std::memcmp((*inline_copy)[0].data(), payloads[0].data(), kBlockBytes));
}

TEST_F(DaemonTest, PinDelDropStats) {
  const std::vector<BlockKey> keys = Keys(2, 3);
  std::vector<std::byte> p0 = Payload(5), p1 = Payload(6);
  std::vector<std::span<const std::byte>> spans = {p0, p1};
  ASSERT_TRUE(client_->PutInline(ns_.id, keys, spans).ok());
  EXPECT_EQ(*client_->Pin(ns_.id, keys, std::chrono::milliseconds(60000)), 2u);
  EXPECT_EQ(*client_->Pin(ns_.id, keys, std::chrono::milliseconds(0)), 2u);
  EXPECT_EQ(*client_->Del(ns_.id, std::span(keys).first(1)), 1u);
  Result<std::string> stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->front(), '{');
  Result<size_t> dropped = client_->Drop(ns_.id);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(client_->Lookup(ns_.id, keys)->prefix, 0u);
}

TEST_F(DaemonTest, LongKeyListsInOneRoundTrip) {
  std::vector<BlockKey> keys(kMaxKeysPerCommand + 10);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = BlockKey{{i, ~i}};
  const uint64_t trips = client_->counters().round_trips;
  Result<LookupResult> lookup = client_->Lookup(ns_.id, keys);
  ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
  EXPECT_EQ(lookup->prefix, 0u);
  EXPECT_EQ(client_->counters().round_trips, trips + 1);
}

// One step's lookups of several requests: one round trip, each chain answered as Lookup would,
// a long chain's later chunks not asked after the miss in its first, an empty chain a miss.
TEST_F(DaemonTest, LookupManyInOneRoundTrip) {
  const std::vector<BlockKey> a = Keys(3, 7), d = Keys(2, 8);
  std::vector<BlockKey> b(kMaxKeysPerCommand + 10);
  for (size_t i = 0; i < b.size(); ++i) b[i] = BlockKey{{i + 1, ~i}};
  std::vector<std::byte> p0 = Payload(7), p1 = Payload(8);
  std::vector<std::span<const std::byte>> spans = {p0, p1};
  ASSERT_TRUE(client_->PutInline(ns_.id, std::span(a).first(2), spans).ok());
  ASSERT_TRUE(client_->PutInline(ns_.id, d, spans).ok());
  const std::span<const BlockKey> chains[] = {a, b, {}, d};
  const uint64_t trips = client_->counters().round_trips;
  Result<std::vector<LookupResult>> found = client_->LookupMany(ns_.id, chains);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(client_->counters().round_trips, trips + 1);
  ASSERT_EQ(found->size(), 4u);
  EXPECT_EQ((*found)[0].prefix, 2u);
  EXPECT_EQ((*found)[0].tiers.size(), 2u);
  EXPECT_EQ((*found)[1].prefix, 0u);
  EXPECT_EQ((*found)[2].prefix, 0u);
  EXPECT_EQ((*found)[3].prefix, 2u);
  EXPECT_EQ((*found)[3].tiers, (*client_->Lookup(ns_.id, d)).tiers);
}

TEST_F(DaemonTest, AsyncAndCAbi) {
  const std::vector<BlockKey> keys = Keys(1, 4);
  std::vector<std::byte> payload = Payload(7);
  {
    Result<Client> second = Client::Connect(daemon_.url());
    ASSERT_TRUE(second.ok());
    AsyncClient async(std::move(second).value());
    auto put = async.Put(ns_.id, keys, {{{payload.data(), payload.size()}}});
    ASSERT_TRUE(put.get().ok());
    EXPECT_EQ(async.Lookup(ns_.id, keys).get()->prefix, 1u);
  }
  kvtier_client* c = nullptr;
  ASSERT_EQ(kvtier_connect(daemon_.url().c_str(), nullptr, 5000, &c), KVTIER_OK) << kvtier_last_error();
  ASSERT_EQ(kvtier_attach(c), KVTIER_OK) << kvtier_last_error();
  kvtier_key ns, key;
  ns_.id.ToBytes(reinterpret_cast<std::byte*>(ns.bytes));
  keys[0].ToBytes(reinterpret_cast<std::byte*>(key.bytes));
  std::vector<std::byte> out(kBlockBytes);
  void* dst[] = {out.data()};
  size_t served = 0;
  ASSERT_EQ(kvtier_get(c, &ns, &key, 1, dst, kBlockBytes, &served), KVTIER_OK) << kvtier_last_error();
  EXPECT_EQ(served, 1u);
  EXPECT_EQ(out, payload);
  kvtier_close(c);
}

}  // namespace
}  // namespace kvtier::client
