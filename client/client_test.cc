#include "client/client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/testing/in_process_daemon.h"
#include "daemon/config/daemon_config.h"
#include "daemon/server/server.h"

namespace kvtier::client {
namespace {

using testing::FaultProxy;
using testing::InProcessDaemon;

constexpr uint64_t kBlockBytes = 8192;

hashing::NamespaceDescriptor TestDescriptor() {
  hashing::NamespaceDescriptor d;
  d.model_id = "test/model";
  d.kv_dtype = "bf16";
  d.num_layers = 2;
  d.num_kv_heads = 1;
  d.head_dim = 64;
  d.tokens_per_block = 4;
  d.layout_tag = "test";
  return d;
}

// A block whose bytes say which key and which fill they hold.
std::vector<std::byte> Payload(size_t index, size_t bytes = kBlockBytes) {
  std::vector<std::byte> p(bytes);
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>((index * 131 + i * 7) & 0xff);
  return p;
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<Client> client = Client::Connect(server_.url(), Options());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::make_unique<Client>(std::move(client).value());
    Result<NamespaceInfo> ns = client_->RegisterNamespace(TestDescriptor(), kBlockBytes);
    ASSERT_TRUE(ns.ok()) << ns.status().ToString();
    ns_ = *ns;
  }

  static ConnectOptions Options() {
    ConnectOptions options;
    options.timeout = std::chrono::milliseconds(5000);
    return options;
  }

  std::vector<BlockKey> Keys(size_t n) {
    std::vector<uint32_t> tokens(n * ns_.tokens_per_block);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 17 + 3);
    Result<std::vector<BlockKey>> keys = Client::HashTokens(ns_, tokens);
    EXPECT_TRUE(keys.ok());
    return *keys;
  }

  InProcessDaemon server_;
  std::unique_ptr<Client> client_;
  NamespaceInfo ns_;
};

TEST_F(ClientTest, PingAndGenericSetGet) {
  EXPECT_TRUE(client_->Ping().ok());
  EXPECT_TRUE(client_->Set("greeting", "hello").ok());
  Result<std::string> got = client_->Get("greeting");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "hello");
  EXPECT_EQ(client_->Get("absent").status().code(), StatusCode::kNotFound);
}

TEST_F(ClientTest, RegisterAgreesWithTheLocalHash) {
  EXPECT_EQ(ns_.id, *hashing::ComputeNamespaceId(TestDescriptor()));
  EXPECT_EQ(ns_.block_bytes, kBlockBytes);
  EXPECT_EQ(ns_.tokens_per_block, 4u);
  hashing::NamespaceDescriptor bad = TestDescriptor();
  bad.kv_dtype = "BF16";
  const Status s = client_->RegisterNamespace(bad).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("kv_dtype", 0), 0u) << s.message();
}

TEST_F(ClientTest, InlinePutLookupGet) {
  const std::vector<BlockKey> keys = Keys(3);
  std::vector<std::vector<std::byte>> payloads = {Payload(0), Payload(1), Payload(2)};
  std::vector<std::span<const std::byte>> spans(payloads.begin(), payloads.begin() + 2);
  Result<std::vector<Status>> put = client_->PutInline(ns_.id, std::span(keys).first(2), spans);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_TRUE((*put)[0].ok() && (*put)[1].ok());
  Result<std::vector<Status>> again =
      client_->PutInline(ns_.id, std::span(keys).first(1), std::span(spans).first(1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].code(), StatusCode::kAlreadyExists);

  Result<LookupResult> lookup = client_->Lookup(ns_.id, keys);
  ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
  EXPECT_EQ(lookup->prefix, 2u);
  EXPECT_EQ(lookup->tiers, (std::vector<TierId>{TierId::kHost, TierId::kHost}));

  std::vector<std::vector<std::byte>> out(3, std::vector<std::byte>(kBlockBytes));
  std::vector<std::span<std::byte>> out_spans(out.begin(), out.end());
  Result<size_t> served = client_->GetInline(ns_.id, keys, out_spans);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(*served, 2u);
  EXPECT_EQ(out[0], payloads[0]);
  EXPECT_EQ(out[1], payloads[1]);

  Result<std::vector<std::string>> strings = client_->GetInline(ns_.id, keys);
  ASSERT_TRUE(strings.ok());
  ASSERT_EQ(strings->size(), 2u);
  EXPECT_EQ(0, std::memcmp((*strings)[1].data(), payloads[1].data(), kBlockBytes));

  std::vector<std::byte> small(16);
  std::vector<std::span<std::byte>> wrong = {small};
  EXPECT_EQ(client_->GetInline(ns_.id, std::span(keys).first(1), wrong).status().code(),
            StatusCode::kInvalidArgument);
  // Regression: a wrong size past the first block returned the blocks before it, so the caller's
  // bug looked like a miss.
  std::vector<std::span<std::byte>> second_wrong = {out_spans[0], small};
  EXPECT_EQ(client_->GetInline(ns_.id, std::span(keys).first(2), second_wrong).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, InlinePutReportsPerKeyStatus) {
  const std::vector<BlockKey> keys = Keys(2);
  std::vector<std::byte> good = Payload(0);
  std::vector<std::byte> short_block(100);
  std::vector<std::span<const std::byte>> spans = {good, short_block};
  Result<std::vector<Status>> put = client_->PutInline(ns_.id, keys, spans);
  ASSERT_TRUE(put.ok());
  EXPECT_TRUE((*put)[0].ok());
  EXPECT_EQ((*put)[1].code(), StatusCode::kInvalidArgument);
  // A command refused as a whole (unknown namespace) gives every key its status.
  Result<std::vector<Status>> unknown =
      client_->PutInline(NamespaceId{{1, 2}}, std::span(keys).first(1), std::span(spans).first(1));
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ((*unknown)[0].code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->PutInline(ns_.id, keys, std::span(spans).first(1)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, ScatterGatherSegmentsRoundTripInline) {
  const std::vector<BlockKey> keys = Keys(1);
  const std::vector<std::byte> whole = Payload(5);
  // The block lives in three pieces of caller memory, like per-layer K/V pages.
  const ConstSegment parts[] = {
      {whole.data(), 1000}, {whole.data() + 1000, 5000}, {whole.data() + 6000, kBlockBytes - 6000}};
  const ConstBlock blocks[] = {ConstBlock(parts)};
  ASSERT_TRUE(client_->PutInline(ns_.id, keys, blocks).ok());
  std::vector<std::byte> a(3000), b(kBlockBytes - 3000);
  const MutableSegment out_parts[] = {{a.data(), a.size()}, {b.data(), b.size()}};
  const MutableBlock out_blocks[] = {MutableBlock(out_parts)};
  Result<size_t> served = client_->GetInline(ns_.id, keys, out_blocks);
  ASSERT_TRUE(served.ok());
  EXPECT_EQ(*served, 1u);
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_EQ(a, whole);
}

TEST_F(ClientTest, LongKeyListsArePipelinedInOneRoundTrip) {
  // 150,000 keys are three KVT.DEL commands. The server holds every reply until all three have
  // arrived: a client that waited for the first reply before sending the rest would time out.
  std::vector<BlockKey> keys(2 * kMaxKeysPerCommand + 100);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = BlockKey{{i, i}};
  server_.faults().hold_replies_until = 1 /*REGISTER*/ + 3;
  const uint64_t trips = client_->counters().round_trips;
  Result<size_t> removed = client_->Del(ns_.id, keys);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 0u);
  EXPECT_EQ(client_->counters().round_trips, trips + 1);
  const std::vector<std::string> seen = server_.commands();
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "KVT.DEL"), 3);
}

// A chain longer than one command with a miss in its first chunk: the later chunk, past the
// miss, is not looked up, so its blocks are neither counted as hits nor held. (All chunks sent at
// once, the daemon would have looked up and held the present block at the end.)
TEST_F(ClientTest, LookupPastAMissAsksNothing) {
  const std::vector<BlockKey> keys = Keys(3);
  std::vector<std::byte> p0 = Payload(0), p1 = Payload(1);
  std::vector<std::span<const std::byte>> spans = {p0, p1};
  ASSERT_TRUE(client_->PutInline(ns_.id, std::span(keys).first(2), spans).ok());
  std::vector<BlockKey> long_chain(kMaxKeysPerCommand + 10, keys[2]);
  std::copy(keys.begin(), keys.begin() + 2, long_chain.begin());
  long_chain.back() = keys[0];  // present, but past the miss
  const std::span<const BlockKey> chains[] = {long_chain, keys};
  const auto lookups = [&] {
    const std::vector<std::string> names = server_.commands();
    return std::count(names.begin(), names.end(), "KVT.LOOKUP");
  };
  const auto before = lookups();
  const uint64_t trips = client_->counters().round_trips;
  Result<std::vector<LookupResult>> found =
      client_->LookupMany(ns_.id, chains, std::chrono::milliseconds(1000));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ((*found)[0].prefix, 2u);
  EXPECT_EQ((*found)[1].prefix, 2u);
  EXPECT_EQ(lookups(), before + 2);  // the first chunk of each chain, nothing more
  EXPECT_EQ(client_->counters().round_trips, trips + 1);

  // A hold above the daemon's limit is refused here, before anything is sent.
  Result<std::vector<LookupResult>> too_long =
      client_->LookupMany(ns_.id, chains, kMaxLookupHold + std::chrono::milliseconds(1));
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument) << too_long.status().ToString();
  EXPECT_EQ(lookups(), before + 2);
  EXPECT_TRUE(client_->usable());
  EXPECT_TRUE(client_->LookupMany(ns_.id, chains, kMaxLookupHold).ok());
}

// An inline get longer than one command with a miss in its first: the command past the miss is
// not sent, so its blocks are not read. The same for the form that returns strings, whose
// commands are small.
TEST_F(ClientTest, InlineGetPastAMissReadsNothing) {
  const std::vector<BlockKey> keys = Keys(2);
  const std::vector<std::byte> p0 = Payload(0);
  const std::vector<std::span<const std::byte>> spans = {p0};
  ASSERT_TRUE(client_->PutInline(ns_.id, std::span(keys).first(1), spans).ok());
  std::vector<BlockKey> many(kMaxKeysPerCommand + 10, keys[1]);
  many.front() = keys[0];
  many.back() = keys[0];  // present, but past the miss
  std::vector<std::byte> out(kBlockBytes);
  // Outputs past the first are never written: empty ones keep a command at kMaxKeysPerCommand.
  std::vector<std::span<std::byte>> outputs(many.size());
  outputs.front() = out;
  const auto gets = [&] {
    const std::vector<std::string> names = server_.commands();
    return std::count(names.begin(), names.end(), "KVT.GET");
  };
  auto before = gets();
  Result<size_t> served = client_->GetInline(ns_.id, many, outputs);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(*served, 1u);
  EXPECT_EQ(out, p0);
  EXPECT_EQ(gets(), before + 1);

  const std::vector<BlockKey> short_chain = {keys[0], keys[1], keys[1], keys[1], keys[0]};
  before = gets();
  Result<std::vector<std::string>> strings = client_->GetInline(ns_.id, short_chain);
  ASSERT_TRUE(strings.ok()) << strings.status().ToString();
  EXPECT_EQ(strings->size(), 1u);
  EXPECT_EQ(gets(), before + 1);
}

// An inline get whose second round trip fails returns the blocks the first one served: they are
// the call's result, a prefix. A lost connection is then what the next call reports.
TEST_F(ClientTest, AnInlineGetThatFailsPartWayReturnsWhatItServed) {
  const std::vector<BlockKey> keys = Keys(6);
  std::vector<std::vector<std::byte>> payloads;
  for (size_t i = 0; i < keys.size(); ++i) payloads.push_back(Payload(i));
  const std::vector<std::span<const std::byte>> spans(payloads.begin(), payloads.end());
  ASSERT_TRUE(client_->PutInline(ns_.id, keys, spans).ok());
  FaultProxy& faults = server_.faults();
  // The first KVT.GET of the call (4 keys) is answered; the one after it is refused.
  faults.OnCommand("KVT.GET",
                   [&faults] { faults.SetRawReply("KVT.GET", "-BUSY no room now\r\n"); });
  Result<std::vector<std::string>> strings = client_->GetInline(ns_.id, keys);
  ASSERT_TRUE(strings.ok()) << strings.status().ToString();
  ASSERT_EQ(strings->size(), 4u);
  EXPECT_EQ(0, std::memcmp((*strings)[3].data(), payloads[3].data(), kBlockBytes));
  EXPECT_TRUE(client_->usable());

  // Now the connection is lost instead.
  faults.OnCommand("KVT.GET", [&faults] { faults.SetCloseOn("KVT.GET"); });
  strings = client_->GetInline(ns_.id, keys);
  ASSERT_TRUE(strings.ok()) << strings.status().ToString();
  EXPECT_EQ(strings->size(), 4u);
  EXPECT_FALSE(client_->usable());
  EXPECT_EQ(client_->Ping().code(), StatusCode::kDeviceError);
}

// The form that returns strings, over a prefix longer than its first small command: the rest
// comes in one more round trip, sized by the block size the first one showed.
TEST_F(ClientTest, InlineGetOfStringsSizesItsLaterCommands) {
  const std::vector<BlockKey> keys = Keys(40);
  std::vector<std::vector<std::byte>> payloads;
  for (size_t i = 0; i < keys.size(); ++i) payloads.push_back(Payload(i));
  const std::vector<std::span<const std::byte>> spans(payloads.begin(), payloads.end());
  ASSERT_TRUE(client_->PutInline(ns_.id, keys, spans).ok());
  const uint64_t trips = client_->counters().round_trips;
  Result<std::vector<std::string>> strings = client_->GetInline(ns_.id, keys);
  ASSERT_TRUE(strings.ok()) << strings.status().ToString();
  ASSERT_EQ(strings->size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(0, std::memcmp((*strings)[i].data(), payloads[i].data(), kBlockBytes)) << i;
  }
  EXPECT_EQ(client_->counters().round_trips, trips + 2);
}

TEST_F(ClientTest, PipelineExecutesInOrder) {
  Pipeline pipeline;
  pipeline.Add({"SET", "a", "1"});
  pipeline.Add({"GET", "a"});
  pipeline.Add({"NOSUCHCOMMAND"});
  pipeline.Add({"PING"});
  server_.faults().hold_replies_until = 1 + 4;
  Result<std::vector<resp::Reply>> replies = client_->Execute(pipeline);
  ASSERT_TRUE(replies.ok()) << replies.status().ToString();
  ASSERT_EQ(replies->size(), 4u);
  EXPECT_EQ((*replies)[0].str, "OK");
  EXPECT_EQ((*replies)[1].str, "1");
  EXPECT_TRUE((*replies)[2].is_error());
  EXPECT_EQ((*replies)[3].str, "PONG");
}

// An empty command would go out as `*0`, which the daemon ignores as Redis does: the client would
// wait for a reply that never comes, then give the connection up. It is refused before sending.
TEST_F(ClientTest, AnEmptyCommandIsRefusedBeforeItIsSent) {
  const size_t sent = server_.commands().size();
  Result<resp::Reply> reply = client_->Command({});
  EXPECT_EQ(reply.status().code(), StatusCode::kInvalidArgument) << reply.status().ToString();
  Pipeline pipeline;
  pipeline.Add({"PING"});
  pipeline.Add(std::span<const std::string>());
  EXPECT_EQ(pipeline.size(), 2u);
  Result<std::vector<resp::Reply>> replies = client_->Execute(pipeline);
  EXPECT_EQ(replies.status().code(), StatusCode::kInvalidArgument) << replies.status().ToString();
  EXPECT_EQ(server_.commands().size(), sent);  // not even the PING went out
  EXPECT_TRUE(client_->usable());
  EXPECT_TRUE(client_->Ping().ok());
  pipeline.Clear();
  pipeline.Add({"PING"});
  replies = client_->Execute(pipeline);
  ASSERT_TRUE(replies.ok()) << replies.status().ToString();
  EXPECT_EQ((*replies)[0].str, "PONG");
}

TEST_F(ClientTest, RefreshAnswersTheCachedPrefix) {
  const std::vector<BlockKey> keys = Keys(3);
  std::vector<std::byte> p0 = Payload(0), p1 = Payload(1);
  std::vector<std::span<const std::byte>> spans = {p0, p1};
  ASSERT_TRUE(client_->PutInline(ns_.id, std::span(keys).first(2), spans).ok());
  Result<size_t> prefix = client_->Refresh(ns_.id, keys);
  ASSERT_TRUE(prefix.ok()) << prefix.status().ToString();
  EXPECT_EQ(*prefix, 2u);
  EXPECT_EQ(*client_->Refresh(ns_.id, {}), 0u);
  // More keys than one command takes, with the hole in the first chunk: the second chunk is not
  // sent (its blocks, past the hole, must keep their place), and the prefix stops in the first.
  std::vector<BlockKey> many(kMaxKeysPerCommand + 10, keys[2]);
  std::copy(keys.begin(), keys.begin() + 2, many.begin());
  many.back() = keys[0];  // a present block in the second chunk, which the daemon would refresh
  const uint64_t trips = client_->counters().round_trips;
  const auto refreshes = [&] {
    const std::vector<std::string> names = server_.commands();
    return std::count(names.begin(), names.end(), "KVT.REFRESH");
  };
  const auto before = refreshes();
  prefix = client_->Refresh(ns_.id, many);
  ASSERT_TRUE(prefix.ok()) << prefix.status().ToString();
  EXPECT_EQ(*prefix, 2u);
  EXPECT_EQ(client_->counters().round_trips, trips + 1);
  EXPECT_EQ(refreshes(), before + 1);
}

// A chain longer than one command, all of it cached: the refresh goes chunk by chunk and ends in
// the order one command would leave, the head the most recent and the deepest block the least.
TEST(ClientRefreshTest, AChainLongerThanOneCommandEndsWithItsDeepestBlockLeastRecent) {
  constexpr uint64_t kSmallBlock = 512;  // 65,539 blocks in 32 MiB
  InProcessDaemon server(InProcessDaemon::Options{.arena_bytes = uint64_t{64} << 20});
  // The put of 65,539 blocks is answered once all are stored: under ASan on a loaded machine that
  // took more than the default 10 s without a byte of reply.
  ConnectOptions patient;
  patient.timeout = std::chrono::milliseconds(120'000);
  Result<Client> connected = Client::Connect(server.url(), patient);
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  Client& client = *connected;
  Result<NamespaceInfo> ns = client.RegisterNamespace(TestDescriptor(), kSmallBlock);
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  std::vector<uint32_t> tokens((kMaxKeysPerCommand + 3) * ns->tokens_per_block);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i);
  Result<std::vector<BlockKey>> keys = Client::HashTokens(*ns, tokens);
  ASSERT_TRUE(keys.ok());
  const std::vector<std::byte> payload = Payload(0, kSmallBlock);
  const std::vector<std::span<const std::byte>> blocks(keys->size(), payload);
  Result<std::vector<Status>> put = client.PutInline(ns->id, *keys, blocks);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (const Status& st : *put) ASSERT_TRUE(st.ok()) << st.ToString();

  Result<size_t> prefix = client.Refresh(ns->id, *keys);
  ASSERT_TRUE(prefix.ok()) << prefix.status().ToString();
  EXPECT_EQ(*prefix, keys->size());
  // One block out, the least recent: the deepest, so the prefix loses only its last block. (The
  // first chunk refreshed after the second would leave the first chunk's last block the least
  // recent, and a hole at 65,535.)
  store::Store& store = server.server().store();
  const uint64_t used = store.tier(TierId::kHost)->Stats().used_bytes;
  ASSERT_EQ(store.EvictToTarget(TierId::kHost, used - 1, 1), 1u);
  const uint64_t trips = client.counters().round_trips;
  Result<LookupResult> found = client.Lookup(ns->id, *keys);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->prefix, keys->size() - 1);
  EXPECT_EQ(client.counters().round_trips, trips + 2);  // the first chunk whole: the second asked
}

TEST_F(ClientTest, PinDelDropStats) {
  const std::vector<BlockKey> keys = Keys(2);
  std::vector<std::byte> p0 = Payload(0), p1 = Payload(1);
  std::vector<std::span<const std::byte>> spans = {p0, p1};
  ASSERT_TRUE(client_->PutInline(ns_.id, keys, spans).ok());
  EXPECT_EQ(*client_->Pin(ns_.id, keys, std::chrono::milliseconds(1000)), 2u);
  EXPECT_EQ(*client_->Del(ns_.id, std::span(keys).first(1)), 1u);
  Result<std::string> stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  // The daemon's KVT.STATS document, passed on as it came.
  EXPECT_EQ(nlohmann::json::parse(*stats)["totals"]["blocks_present"], 1);
  EXPECT_EQ(*client_->Drop(ns_.id), 1u);
  EXPECT_EQ(client_->Drop(ns_.id).status().code(), StatusCode::kNotFound);
}

TEST_F(ClientTest, MalformedReplyMakesTheClientUnusable) {
  server_.faults().SetRawReply("PING", "?garbage\r\n");
  const Status first = client_->Ping();
  EXPECT_EQ(first.code(), StatusCode::kInternal);
  EXPECT_FALSE(client_->usable());
  const Status later = client_->Ping();
  EXPECT_EQ(later.code(), StatusCode::kInternal);
  EXPECT_NE(later.message().find("earlier error"), std::string::npos);
}

TEST_F(ClientTest, ClosedConnectionIsADeviceError) {
  server_.faults().SetCloseOn("PING");
  EXPECT_EQ(client_->Ping().code(), StatusCode::kDeviceError);
  EXPECT_FALSE(client_->usable());
}

TEST(ClientTcpTest, InlinePathWorksAndAttachIsRefused) {
  InProcessDaemon server(
      InProcessDaemon::Options{.tcp = true, .password = "", .arena_bytes = 1 << 20});
  Result<Client> client = Client::Connect(server.url());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(client->Ping().ok());
  const Status attach = client->Attach().status();
  EXPECT_EQ(attach.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(attach.message().find("unix://"), std::string::npos);
  EXPECT_TRUE(client->usable());
  const std::vector<BlockKey> keys = {BlockKey{{1, 1}}};
  const void* blocks[] = {nullptr};
  EXPECT_EQ(client->Put(NamespaceId{}, keys, blocks, 0).status().code(),
            StatusCode::kInvalidArgument);
}

// A connection past kvtierd's limit is closed with an error that says to retry later: it was an
// ERR, which the client read as the caller's mistake (INVALID_ARGUMENT, KVTIER_EINVAL in C).
TEST(ClientLimitTest, AConnectionPastTheDaemonsLimitIsBusy) {
  InProcessDaemon daemon({.tcp = true, .max_clients = 1});
  auto first = Client::Connect(daemon.url());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(first->Ping().ok());
  auto second = Client::Connect(daemon.url());
  const Status refused = second.ok() ? second->Ping() : second.status();
  EXPECT_EQ(refused.code(), StatusCode::kBusy) << refused.ToString();
  EXPECT_NE(refused.message().find("max number of clients"), std::string::npos);
}

// kvtierd holds a SET, DEL or GETDEL of a value another client is still receiving for
// reader_wait_ms, and a put or read waiting for the mover for mover_wait_ms, then answers
// (BUSY, or a miss), after one more retry pause (at most 32 ms). A client on its default
// timeout must hear that answer: with both at 10 s it timed out first, lost its connection, and
// a GETDEL's value went to a closed socket. A quarter of the timeout is left for the network and
// a loaded daemon.
TEST(ClientDefaultsTest, KvtierdAnswersItsBoundedWaitsBeforeTheDefaultTimeout) {
  constexpr std::chrono::milliseconds kLongestRetryPause{32};
  const std::chrono::milliseconds timeout = ConnectOptions{}.timeout * 3 / 4;
  for (const uint64_t wait_ms :
       {server::ServerOptions{}.reader_wait_ms, server::ServerOptions{}.mover_wait_ms,
        config::DaemonConfig{}.reader_wait_ms, config::DaemonConfig{}.mover_wait_ms}) {
    EXPECT_LE(std::chrono::milliseconds(wait_ms) + kLongestRetryPause, timeout) << wait_ms;
  }
}

}  // namespace
}  // namespace kvtier::client
