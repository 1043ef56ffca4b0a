// The inline KV-cache commands: KVT.REGISTER, LOOKUP, PUT, GET, PIN, DEL, DROP and STATS.
#include <gtest/gtest.h>

#include "daemon/server/generic_keyspace.h"
#include "daemon/server/test_client.h"
#include "hashing/namespace_descriptor.h"
#include "tests/fakes/fake_tier.h"

namespace kvtier::server {
namespace {

using testing::Bulk;
using testing::PackKeys;
using testing::TestClient;
using testing::TestKey;
using testing::TestServer;
using testing::TimedCommands;

// 2 (K, V) x 2 layers x 1 kv head x 4 head dim x 2 tokens x 2 bytes (fp16).
constexpr size_t kBlockBytes = 64;

std::vector<std::string> RegisterArgs() {
  return {"KVT.REGISTER", "model", "tiny/model", "dtype", "fp16",         "layers", "2",
          "kv_heads",     "1",     "head_dim",   "4",     "block_tokens", "2",      "layout",
          "nhd"};
}

std::string ExpectedNamespace() {
  hashing::NamespaceDescriptor d;
  d.model_id = "tiny/model";
  d.kv_dtype = "fp16";
  d.num_layers = 2;
  d.num_kv_heads = 1;
  d.head_dim = 4;
  d.tokens_per_block = 2;
  d.layout_tag = "nhd";
  return hashing::ComputeNamespaceId(d)->ToHex();
}

std::string Payload(int n) { return std::string(kBlockBytes, static_cast<char>('A' + n)); }

std::vector<BlockKey> Keys(std::initializer_list<int> ns) {
  std::vector<BlockKey> keys;
  for (int n : ns) keys.push_back(TestKey(static_cast<uint64_t>(n)));
  return keys;
}

class KvtCommandsTest : public ::testing::Test {
 protected:
  static ServerOptions Options() {
    ServerOptions o;
    o.max_lookup_keys = 8;
    return o;
  }
  void SetUp() override {
    ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString();
    c_ = ts_.ConnectTcp();
    ASSERT_EQ(c_.Call(RegisterArgs()),
              "*4\r\n$2\r\nns\r\n" + Bulk(ns_) + "$11\r\nblock_bytes\r\n:64\r\n");
  }
  // Stores blocks 0..n-1 of the test chain inline.
  void PutChain(int n) {
    std::vector<std::string> put = {"KVT.PUT", ns_, ""};
    std::string expected = "*" + std::to_string(n) + "\r\n";
    std::vector<BlockKey> keys;
    for (int i = 0; i < n; ++i) {
      keys.push_back(TestKey(static_cast<uint64_t>(i)));
      put.push_back(Payload(i));
      expected += "+OK\r\n";
    }
    put[2] = PackKeys(keys);
    ASSERT_EQ(c_.Call(put), expected);
  }

  TestServer ts_{Options()};
  TestClient c_;
  const std::string ns_ = ExpectedNamespace();
};

TEST_F(KvtCommandsTest, RegisterIsIdempotentAndSpeaksResp3) {
  EXPECT_EQ(c_.Call(RegisterArgs()),
            "*4\r\n$2\r\nns\r\n" + Bulk(ns_) + "$11\r\nblock_bytes\r\n:64\r\n");
  EXPECT_EQ(c_.Call({"HELLO", "3"}).substr(0, 4), "%7\r\n");
  EXPECT_EQ(c_.Call(RegisterArgs()),
            "%2\r\n$2\r\nns\r\n" + Bulk(ns_) + "$11\r\nblock_bytes\r\n:64\r\n");
}

TEST_F(KvtCommandsTest, RegisterReportsTheBadField) {
  EXPECT_EQ(c_.Call({"KVT.REGISTER", "dtype", "fp16", "block_tokens", "2", "layout", "x"}),
            "-INVALID model: required\r\n");
  std::vector<std::string> args = RegisterArgs();
  args[4] = "fp33";
  EXPECT_EQ(c_.Call(args),
            "-INVALID dtype: unknown dtype 'fp33' (expected fp32, fp16, bf16, fp8_e4m3, fp8_e5m2 "
            "or int8)\r\n");
  args = RegisterArgs();
  args[6] = "0";
  EXPECT_EQ(c_.Call(args), "-INVALID layers: must be in [1, 1024], got 0\r\n");
  args[6] = "two";
  EXPECT_EQ(c_.Call(args), "-INVALID layers: not an unsigned 32-bit integer\r\n");
  args = RegisterArgs();
  args.insert(args.end(), {"colour", "blue"});
  EXPECT_EQ(c_.Call(args), "-INVALID colour: unknown field\r\n");
  args = RegisterArgs();
  args.insert(args.end(), {"layers", "3"});
  EXPECT_EQ(c_.Call(args), "-INVALID layers: given twice\r\n");
  args = RegisterArgs();
  args.insert(args.end(), {"block_bytes", "128"});  // same descriptor, another size
  const std::string reply = c_.Call(args);
  EXPECT_EQ(reply.substr(0, 22), "-INVALID block_bytes: ") << reply;
  args.pop_back();
  EXPECT_EQ(c_.Call(args), "-ERR wrong number of arguments for 'kvt.register' command\r\n");
}

// A model name that is not UTF-8 used to be registered, and its label then broke KVT.STATS and
// /stats for every client. It is refused under the wire name of the field.
TEST_F(KvtCommandsTest, RegisterRefusesNamesThatAreNotUtf8) {
  std::vector<std::string> args = RegisterArgs();
  args[2] = "tiny/\xFFmodel";
  EXPECT_EQ(c_.Call(args), "-INVALID model: not valid UTF-8\r\n");
  args = RegisterArgs();
  args.insert(args.end(), {"revision", "\xC0\xAF"});
  EXPECT_EQ(c_.Call(args), "-INVALID revision: not valid UTF-8\r\n");
  args = RegisterArgs();
  args[14] = "nhd\xED\xA0\x80";
  EXPECT_EQ(c_.Call(args), "-INVALID layout: not valid UTF-8\r\n");
  args = RegisterArgs();
  args.insert(args.end(), {"salt", std::string("\xFF\x00", 2)});  // a salt is any bytes
  EXPECT_EQ(c_.Call(args).substr(0, 4), "*4\r\n");
}

TEST_F(KvtCommandsTest, RegisterWithAnExplicitBlockSize) {
  std::vector<std::string> args = RegisterArgs();
  args[2] = "mla/model";
  args.insert(args.end(), {"block_bytes", "1000"});
  const std::string reply = c_.Call(args);
  EXPECT_EQ(reply.substr(reply.size() - 25), "$11\r\nblock_bytes\r\n:1000\r\n") << reply;
}

TEST_F(KvtCommandsTest, PutLookupGet) {
  const std::string keys = PackKeys(Keys({0, 1, 2, 3}));
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys}), "*2\r\n:0\r\n$0\r\n\r\n");
  PutChain(3);
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys}), "*2\r\n:3\r\n$3\r\n111\r\n");
  EXPECT_EQ(c_.Call({"KVT.GET", ns_, keys}),
            "*4\r\n" + Bulk(Payload(0)) + Bulk(Payload(1)) + Bulk(Payload(2)) + "$-1\r\n");
  // Already stored: nothing to do.
  EXPECT_EQ(c_.Call({"KVT.PUT", ns_, PackKeys(Keys({1})), Payload(1)}), "*1\r\n+EXISTS\r\n");
}

// Each lookup, put and get is one observation of the inline path, under the coldest tier it found
// or placed a block in; other commands are not timed.
TEST_F(KvtCommandsTest, LookupsPutsAndGetsAreTimedByPathAndTier) {
  using metrics::RequestOp;
  using metrics::RequestPath;
  const std::string keys = PackKeys(Keys({0, 1, 2, 3}));
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys}), "*2\r\n:0\r\n$0\r\n\r\n");
  PutChain(3);
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys}), "*2\r\n:3\r\n$3\r\n111\r\n");
  EXPECT_EQ(c_.Call({"KVT.GET", ns_, keys}).substr(0, 4), "*4\r\n");
  EXPECT_EQ(c_.Call({"KVT.GET", ns_, PackKeys(Keys({7}))}), "*1\r\n$-1\r\n");
  EXPECT_EQ(c_.Call({"PING"}), "+PONG\r\n");
  EXPECT_EQ(c_.Call({"KVT.DEL", ns_, PackKeys(Keys({2}))}), ":1\r\n");
  Server& server = ts_.server();
  EXPECT_EQ(TimedCommands(server, RequestOp::kLookup, RequestPath::kInline, std::nullopt), 1u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kLookup, RequestPath::kInline, TierId::kHost), 1u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kPut, RequestPath::kInline, TierId::kHost), 1u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kGet, RequestPath::kInline, TierId::kHost), 1u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kGet, RequestPath::kInline, std::nullopt), 1u);
  EXPECT_EQ(TimedCommands(server), 5u);  // REGISTER, PING and DEL are not
}

TEST(KvtCommandsLatencyTest, HistogramsOffTimeNothing) {
  ServerOptions options;
  options.latency_histograms = false;
  TestServer ts(options);
  ASSERT_TRUE(ts.status().ok()) << ts.status().ToString();
  TestClient c = ts.ConnectUnix();
  const std::string ns = ExpectedNamespace();
  ASSERT_EQ(c.Call(RegisterArgs()).substr(0, 4), "*4\r\n");
  EXPECT_EQ(c.Call({"KVT.PUT", ns, PackKeys(Keys({0})), Payload(0)}), "*1\r\n+OK\r\n");
  EXPECT_EQ(c.Call({"KVT.GET", ns, PackKeys(Keys({0}))}), "*1\r\n" + Bulk(Payload(0)));
  EXPECT_TRUE(ts.server().ProcessInfo().requests.empty());
}

// With nvme.write_through a put is acknowledged only once the mover made its NVMe copy, so that
// an acknowledged put survives a crash (Connection::AwaitWriteThroughs). Nothing runs the mover
// here until the test does its work.
TEST(KvtCommandsWriteThroughTest, APutIsAcknowledgedOnlyOnceItsCopyIsMade) {
  store::StoreOptions store_options;
  store_options.background_disk_moves = true;
  store_options.nvme_write_through = true;
  TestServer ts(ServerOptions{}, store_options,
                std::make_unique<::kvtier::testing::FakeTier>(TierId::kNvme, 1 << 20,
                                                              /*addressable=*/false));
  ASSERT_TRUE(ts.status().ok()) << ts.status().ToString();
  TestClient c = ts.ConnectUnix();
  const std::string ns = ExpectedNamespace();
  ASSERT_EQ(c.Call(RegisterArgs()).substr(0, 4), "*4\r\n");
  ASSERT_TRUE(c.Send(testing::Resp({"KVT.PUT", ns, PackKeys(Keys({0})), Payload(0)})));
  ASSERT_TRUE(testing::WaitFor([&] { return ts.store().Stats().committed_puts == 1; }));
  EXPECT_EQ(c.ReadReply(std::chrono::milliseconds(200)), "") << "acknowledged before its copy";
  ts.store().WriteThrough(ts.store().TakeWriteThroughRequests(8));
  EXPECT_EQ(c.ReadReply(), "*1\r\n+OK\r\n");
  EXPECT_EQ(ts.store().Stats().write_throughs, 1u);
}

// A put whose copy was not made is not acknowledged as durable: its status word says why, and the
// block is still served from memory.
TEST(KvtCommandsWriteThroughTest, APutWhoseCopyFailsIsAnsweredWithTheReason) {
  store::StoreOptions store_options;
  store_options.background_disk_moves = true;
  store_options.nvme_write_through = true;
  auto nvme = std::make_unique<::kvtier::testing::FakeTier>(TierId::kNvme, 1 << 20,
                                                            /*addressable=*/false);
  nvme->FailBlocksOf(TestKey(1));
  TestServer ts(ServerOptions{}, store_options, std::move(nvme));
  ASSERT_TRUE(ts.status().ok()) << ts.status().ToString();
  TestClient c = ts.ConnectUnix();
  const std::string ns = ExpectedNamespace();
  ASSERT_EQ(c.Call(RegisterArgs()).substr(0, 4), "*4\r\n");
  ASSERT_TRUE(c.Send(testing::Resp(
      {"KVT.PUT", ns, PackKeys(Keys({0, 1, 2})), Payload(0), Payload(1), Payload(2)})));
  ASSERT_TRUE(testing::WaitFor([&] { return ts.store().Stats().committed_puts == 3; }));
  ts.store().WriteThrough(ts.store().TakeWriteThroughRequests(8));
  EXPECT_EQ(c.ReadReply(), "*3\r\n+OK\r\n+DEVICE\r\n+OK\r\n");
  EXPECT_EQ(ts.store().Stats().write_throughs, 2u);
  EXPECT_EQ(ts.store().Stats().write_through_failures, 1u);
  EXPECT_EQ(c.Call({"KVT.GET", ns, PackKeys(Keys({1}))}), "*1\r\n" + Bulk(Payload(1)));
}

// Past limits.mover_wait_ms the reply goes out without the copy, saying so: per block for
// KVT.PUT, as the command's error for SET and MSET. Nothing runs the mover here.
TEST(KvtCommandsWriteThroughTest, APutWhoseCopyIsLateIsAnsweredTimeout) {
  ServerOptions options;
  options.mover_wait_ms = 50;
  store::StoreOptions store_options;
  store_options.background_disk_moves = true;
  store_options.nvme_write_through = true;
  TestServer ts(options, store_options,
                std::make_unique<::kvtier::testing::FakeTier>(TierId::kNvme, 1 << 20,
                                                              /*addressable=*/false));
  ASSERT_TRUE(ts.status().ok()) << ts.status().ToString();
  TestClient c = ts.ConnectUnix();
  const std::string ns = ExpectedNamespace();
  ASSERT_EQ(c.Call(RegisterArgs()).substr(0, 4), "*4\r\n");
  EXPECT_EQ(c.Call({"KVT.PUT", ns, PackKeys(Keys({0, 1})), Payload(0), Payload(1)}),
            "*2\r\n+TIMEOUT\r\n+TIMEOUT\r\n");
  const std::string in_memory_only = "-TIMEOUT stored in memory only (nvme.write_through): ";
  EXPECT_EQ(c.Call({"SET", "k", "v"}).substr(0, in_memory_only.size()), in_memory_only);
  EXPECT_EQ(c.Call({"MSET", "a", "1", "b", "2"}).substr(0, in_memory_only.size()), in_memory_only);
  EXPECT_EQ(ts.store().Stats().write_through_timeouts, 5u);
  // Stored all the same, and served from memory.
  EXPECT_EQ(c.Call({"KVT.GET", ns, PackKeys(Keys({0, 1}))}),
            "*2\r\n" + Bulk(Payload(0)) + Bulk(Payload(1)));
  EXPECT_EQ(c.Call({"GET", "k"}), "$1\r\nv\r\n");
  EXPECT_EQ(c.Call({"GET", "b"}), "$1\r\n2\r\n");
  // The copies the waiters gave up on are still made, and nothing is kept for them.
  ts.store().WriteThrough(ts.store().TakeWriteThroughRequests(16));
  EXPECT_EQ(ts.store().Stats().write_throughs, 5u);
}

TEST_F(KvtCommandsTest, GetStopsAtTheFirstMiss) {
  PutChain(3);
  EXPECT_EQ(c_.Call({"KVT.DEL", ns_, PackKeys(Keys({1}))}), ":1\r\n");
  EXPECT_EQ(c_.Call({"KVT.GET", ns_, PackKeys(Keys({0, 1, 2}))}),
            "*3\r\n" + Bulk(Payload(0)) + "$-1\r\n$-1\r\n");
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, PackKeys(Keys({0, 1, 2}))}), "*2\r\n:1\r\n$1\r\n1\r\n");
}

TEST_F(KvtCommandsTest, PutChecksSizesAndCounts) {
  EXPECT_EQ(c_.Call({"KVT.PUT", ns_, PackKeys(Keys({0, 1})), Payload(0), "short"}),
            "*2\r\n+OK\r\n+INVALID\r\n");
  EXPECT_EQ(c_.Call({"KVT.PUT", ns_, PackKeys(Keys({0, 1})), Payload(0)}),
            "-ERR wrong number of blocks: 2 keys, 1 blocks\r\n");
}

TEST_F(KvtCommandsTest, PinDelDrop) {
  PutChain(3);
  EXPECT_EQ(c_.Call({"KVT.PIN", ns_, PackKeys(Keys({0, 1, 7})), "60000"}), ":2\r\n");
  EXPECT_EQ(c_.Call({"KVT.PIN", ns_, PackKeys(Keys({0})), "0"}), ":1\r\n");
  EXPECT_EQ(c_.Call({"KVT.PIN", ns_, PackKeys(Keys({0})), "-1"}),
            "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(c_.Call({"KVT.DEL", ns_, PackKeys(Keys({0, 7}))}), ":1\r\n");
  EXPECT_EQ(c_.Call({"KVT.DROP", ns_}), ":2\r\n");
  EXPECT_EQ(c_.Call({"KVT.DROP", ns_}), "-NOTFOUND namespace " + ns_ + " is not registered\r\n");
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, PackKeys(Keys({1}))}), "*2\r\n:0\r\n$0\r\n\r\n");
}

TEST_F(KvtCommandsTest, RefreshAnswersThePrefixAndIsNotALookup) {
  PutChain(2);
  const std::string keys = PackKeys(Keys({0, 1, 2}));
  const std::string before = c_.Call({"KVT.STATS"});
  EXPECT_EQ(c_.Call({"KVT.REFRESH", ns_, keys}), ":2\r\n");
  EXPECT_EQ(c_.Call({"KVT.REFRESH", ns_, PackKeys(Keys({1}))}), ":1\r\n");
  EXPECT_EQ(c_.Call({"KVT.REFRESH", std::string(32, 'f'), keys}), ":0\r\n");
  EXPECT_EQ(c_.Call({"KVT.REFRESH", ns_, "short"}).substr(0, 5), "-ERR ");
  EXPECT_EQ(c_.Call({"KVT.REFRESH", ns_}),
            "-ERR wrong number of arguments for 'kvt.refresh' command\r\n");
  // The namespace's lookup counters did not move.
  const auto lookups = [](const std::string& stats) {
    const size_t at = stats.find("\"lookups\":");
    return stats.substr(at, stats.find(',', at) - at);
  };
  EXPECT_EQ(lookups(c_.Call({"KVT.STATS"})), lookups(before));
}

TEST_F(KvtCommandsTest, LookupHoldAnswersAsLookup) {
  PutChain(2);
  const std::string keys = PackKeys(Keys({0, 1, 2}));
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys, "hold", "2000"}), "*2\r\n:2\r\n$2\r\n11\r\n");
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys, "HOLD", "0"}), "*2\r\n:2\r\n$2\r\n11\r\n");
  const std::string syntax =
      "-ERR syntax error: KVT.LOOKUP <ns> <keys> [HOLD <ms>], ms at most 3600000\r\n";
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys, "HOLD"}), syntax);
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys, "HOLD", "-1"}), syntax);
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys, "HOLD", "3600001"}), syntax);
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys, "KEEP", "10"}), syntax);
}

TEST_F(KvtCommandsTest, UnknownNamespaces) {
  const std::string other(32, 'f');
  const std::string keys = PackKeys(Keys({0, 1}));
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", other, keys}), "*2\r\n:0\r\n$0\r\n\r\n");
  EXPECT_EQ(c_.Call({"KVT.GET", other, keys}), "*2\r\n$-1\r\n$-1\r\n");
  EXPECT_EQ(c_.Call({"KVT.PUT", other, keys, "a", "b"}),
            "-NOTFOUND namespace " + other + " is not registered\r\n");
  EXPECT_EQ(c_.Call({"KVT.PIN", other, keys, "10"}), ":0\r\n");
  EXPECT_EQ(c_.Call({"KVT.DEL", other, keys}), ":0\r\n");
}

TEST_F(KvtCommandsTest, TheGenericNamespaceIsNotReachable) {
  EXPECT_EQ(c_.Call({"SET", "k", "v"}), "+OK\r\n");
  const NamespaceId generic = GenericNamespaceId();
  const std::string keys = PackKeys({GenericKey(generic, "k")});
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", generic.ToHex(), keys}), "*2\r\n:0\r\n$0\r\n\r\n");
  EXPECT_EQ(c_.Call({"KVT.GET", generic.ToHex(), keys}), "*1\r\n$-1\r\n");
  EXPECT_EQ(c_.Call({"KVT.DEL", generic.ToHex(), keys}), ":0\r\n");
  EXPECT_EQ(c_.Call({"KVT.DROP", generic.ToHex()}),
            "-NOTFOUND namespace " + generic.ToHex() + " is not registered\r\n");
  EXPECT_EQ(c_.Call({"GET", "k"}), "$1\r\nv\r\n");
}

TEST_F(KvtCommandsTest, MalformedArguments) {
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", "xyz", ""}),
            "-ERR invalid namespace id: expected 32 hex digits\r\n");
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, std::string(17, 'k')}),
            "-ERR packed keys must be a multiple of 16 bytes, got 17\r\n");
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, std::string(16 * 9, 'k')}), "-ERR too many keys\r\n");
  EXPECT_EQ(c_.Call({"KVT.GET", ns_, std::string(16 * 9, 'k')}), "-ERR too many keys\r\n");
}

TEST_F(KvtCommandsTest, StatsIsTheMetricsJson) {
  PutChain(2);
  const std::string reply = c_.Call({"KVT.STATS"});
  ASSERT_EQ(reply.substr(0, 1), "$");
  const std::string json = reply.substr(reply.find("\r\n") + 2);
  EXPECT_EQ(json.substr(0, 1), "{");
  EXPECT_NE(json.find("\"namespaces\""), std::string::npos);
  // A TCP client is never an admin: the namespace by its ref, not its id.
  EXPECT_NE(json.find(hashing::NamespaceRef(NamespaceId{*Key128::FromHex(ns_)})),
            std::string::npos);
  EXPECT_EQ(json.find(ns_), std::string::npos);
  EXPECT_NE(json.find("\"connected_clients\":1"), std::string::npos) << json;
}

// Regression: a label that is not UTF-8 (as an NVMe catalog written before KVT.REGISTER checked
// names hands it back) made KVT.STATS throw, and the client saw its connection closed.
TEST_F(KvtCommandsTest, StatsSurvivesALabelThatIsNotUtf8) {
  store::NamespaceInfo info;
  info.id = NamespaceId{{7, 7}};
  info.label = "old\xFFmodel fp16 tp0/1";
  ASSERT_TRUE(ts_.store().RegisterNamespace(info).ok());
  const std::string reply = c_.Call({"KVT.STATS"});
  EXPECT_EQ(reply.substr(0, 1), "$") << reply;
  EXPECT_NE(reply.find("old\xEF\xBF\xBDmodel"), std::string::npos);
  EXPECT_EQ(c_.Call({"PING"}), "+PONG\r\n");  // the connection is still open
}

// KVT.GET's reply is sent in pieces when it outgrows the in-flight limit.
TEST(KvtCommandsFlowTest, GetLargerThanTheInflightLimit) {
  ServerOptions o;
  o.max_inflight_bytes_per_client = 100;
  TestServer ts(o);
  ASSERT_TRUE(ts.status().ok());
  TestClient c = ts.ConnectUnix();
  const std::string ns = ExpectedNamespace();
  ASSERT_EQ(c.Call(RegisterArgs()).substr(0, 4), "*4\r\n");
  const std::vector<BlockKey> keys = Keys({0, 1, 2, 3, 4, 5});
  std::vector<std::string> put = {"KVT.PUT", ns, PackKeys(keys)};
  std::string expected = "*6\r\n";
  for (int i = 0; i < 6; ++i) {
    put.push_back(Payload(i));
    expected += Bulk(Payload(i));
  }
  ASSERT_EQ(c.Call(put), "*6\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\n");
  EXPECT_EQ(c.Call({"KVT.GET", ns, PackKeys(keys)}), expected);
  EXPECT_TRUE(ts.WaitForLeases(0));
}

}  // namespace
}  // namespace kvtier::server
