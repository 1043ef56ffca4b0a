// The generic commands (SET, SETNX, GET, GETDEL, GETEX, MSET, MGET, EXISTS, DEL, DBSIZE, TIME,
// INFO), byte for byte.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "daemon/server/generic_keyspace.h"
#include "daemon/server/test_client.h"
#include "tests/fakes/fake_tier.h"

namespace kvtier::server {
namespace {

using testing::Bulk;
using testing::TestClient;
using testing::TestServer;
using testing::TimedCommands;

class GenericCommandsTest : public ::testing::Test {
 protected:
  static ServerOptions Options() {
    ServerOptions o;
    o.max_key_bytes = 16;
    return o;
  }
  void SetUp() override {
    ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString();
    c_ = ts_.ConnectUnix();
    ASSERT_TRUE(c_.connected());
  }
  TestServer ts_{Options()};
  TestClient c_;
};

TEST_F(GenericCommandsTest, SetThenGet) {
  EXPECT_EQ(c_.Call({"GET", "k"}), "$-1\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "hello"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"GET", "k"}), "$5\r\nhello\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "replaced"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"GET", "k"}), "$8\r\nreplaced\r\n");
}

TEST_F(GenericCommandsTest, SetNxStoresOnlyAnAbsentKey) {
  EXPECT_EQ(c_.Call({"SETNX", "k", "first"}), ":1\r\n");
  EXPECT_EQ(c_.Call({"SETNX", "k", "second"}), ":0\r\n");
  EXPECT_EQ(c_.Call({"GET", "k"}), "$5\r\nfirst\r\n");
  EXPECT_EQ(c_.Call({"SET", "gone", "v", "PX", "1"}), "+OK\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(c_.Call({"SETNX", "gone", "again"}), ":1\r\n");  // an expired key is absent
  EXPECT_EQ(c_.Call({"GET", "gone"}), "$5\r\nagain\r\n");
  EXPECT_EQ(c_.Call({"SETNX", "k"}), "-ERR wrong number of arguments for 'setnx' command\r\n");
}

TEST_F(GenericCommandsTest, GetDelAnswersTheValueAndRemovesTheKey) {
  EXPECT_EQ(c_.Call({"SET", "k", "hello"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"GETDEL", "k"}), "$5\r\nhello\r\n");
  EXPECT_EQ(c_.Call({"EXISTS", "k"}), ":0\r\n");
  EXPECT_EQ(c_.Call({"GETDEL", "k"}), "$-1\r\n");
  EXPECT_EQ(c_.Call({"SET", "again", "v"}), "+OK\r\n");  // the key space takes it back
  EXPECT_EQ(c_.Call({"GETDEL", "again"}), "$1\r\nv\r\n");
  EXPECT_EQ(c_.Call({"DBSIZE"}), ":0\r\n");
  EXPECT_EQ(c_.Call({"GETDEL"}), "-ERR wrong number of arguments for 'getdel' command\r\n");
}

TEST_F(GenericCommandsTest, GetExAnswersTheValueAndSetsOrClearsItsExpiry) {
  EXPECT_EQ(c_.Call({"GETEX", "k", "EX", "100"}), "$-1\r\n");  // no key: nothing set
  // As Redis: a missing key is null before its expiry's number is looked at.
  EXPECT_EQ(c_.Call({"GETEX", "k", "EX", "0"}), "$-1\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "hello"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"GETEX", "k"}), "$5\r\nhello\r\n");
  EXPECT_EQ(c_.Call({"TTL", "k"}), ":-1\r\n");
  EXPECT_EQ(c_.Call({"GETEX", "k", "EX", "100"}), "$5\r\nhello\r\n");
  EXPECT_EQ(c_.Call({"TTL", "k"}), ":100\r\n");
  EXPECT_EQ(c_.Call({"GETEX", "k", "px", "5000", "PX", "200000"}), "$5\r\nhello\r\n");
  EXPECT_EQ(c_.Call({"TTL", "k"}), ":200\r\n");  // the same option again: the last one
  EXPECT_EQ(c_.Call({"GETEX", "k", "EX", "x", "EX", "300"}), "$5\r\nhello\r\n");
  EXPECT_EQ(c_.Call({"TTL", "k"}), ":300\r\n");  // only the last one's number is read
  EXPECT_EQ(c_.Call({"GETEX", "k", "PERSIST"}), "$5\r\nhello\r\n");
  EXPECT_EQ(c_.Call({"TTL", "k"}), ":-1\r\n");
  const int64_t in_a_minute = std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count() +
                              60;
  EXPECT_EQ(c_.Call({"GETEX", "k", "EXAT", std::to_string(in_a_minute)}), "$5\r\nhello\r\n");
  const std::string ttl = c_.Call({"TTL", "k"});
  EXPECT_TRUE(ttl == ":60\r\n" || ttl == ":59\r\n" || ttl == ":61\r\n") << ttl;
  // A time already past: the value, then the key is gone.
  EXPECT_EQ(c_.Call({"GETEX", "k", "PXAT", "1"}), "$5\r\nhello\r\n");
  EXPECT_EQ(c_.Call({"EXISTS", "k"}), ":0\r\n");
  EXPECT_EQ(c_.Call({"DBSIZE"}), ":0\r\n");
  // Refused options change nothing.
  EXPECT_EQ(c_.Call({"SET", "k", "v"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"GETEX", "k", "EX", "10", "PERSIST"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"GETEX", "k", "PERSIST", "EX", "10"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"GETEX", "k", "EX", "10", "PX", "10"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"GETEX", "k", "EX"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"GETEX", "k", "KEEPTTL"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"GETEX", "k", "EX", "0"}), "-ERR invalid expire time in 'getex' command\r\n");
  EXPECT_EQ(c_.Call({"GETEX", "k", "EX", "x"}), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(c_.Call({"GETEX", std::string(17, 'k')}), "-ERR key too long\r\n");
  EXPECT_EQ(c_.Call({"GETEX"}), "-ERR wrong number of arguments for 'getex' command\r\n");
  EXPECT_EQ(c_.Call({"TTL", "k"}), ":-1\r\n");
  EXPECT_EQ(c_.Call({"GET", "k"}), "$1\r\nv\r\n");
}

TEST_F(GenericCommandsTest, TimeIsTheServersClock) {
  const int64_t before = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const std::string reply = c_.Call({"TIME"});
  ASSERT_EQ(reply.rfind("*2\r\n$", 0), 0u) << reply;
  // *2 $<n> seconds $<m> microseconds
  std::vector<std::string> parts;
  size_t at = 0;
  while ((at = reply.find("\r\n", at)) != std::string::npos) {
    const size_t next = reply.find("\r\n", at + 2);
    if (next == std::string::npos) break;
    parts.push_back(reply.substr(at + 2, next - at - 2));
    at = next;
  }
  ASSERT_EQ(parts.size(), 4u) << reply;
  const int64_t seconds = std::stoll(parts[1]);
  EXPECT_GE(seconds, before);
  EXPECT_LE(seconds, before + 5);
  EXPECT_LT(std::stoll(parts[3]), 1'000'000);
  EXPECT_EQ(c_.Call({"TIME", "x"}), "-ERR wrong number of arguments for 'time' command\r\n");
}

TEST_F(GenericCommandsTest, ValuesAreBinarySafeAndMayBeEmpty) {
  const std::string binary("a\r\n\0b\r\n", 7);
  EXPECT_EQ(c_.Call({"SET", "bin", binary}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"GET", "bin"}), Bulk(binary));
  EXPECT_EQ(c_.Call({"SET", "empty", ""}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"GET", "empty"}), "$0\r\n\r\n");
  EXPECT_EQ(c_.Call({"EXISTS", "empty"}), ":1\r\n");
}

TEST_F(GenericCommandsTest, RefusesBadSetOptionsAndLongKeys) {
  EXPECT_EQ(c_.Call({"SET", "k", "v", "NX", "XX"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "v", "EX", "10", "PX", "5"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "v", "EX"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "v", "EX", "1.5"}),
            "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "v", "EX", "0"}), "-ERR invalid expire time in 'set' command\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "v", "EX", "9223372036854775807"}),
            "-ERR invalid expire time in 'set' command\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "v", "KEEPTTL", "PX", "5"}), "-ERR syntax error\r\n");
  // As Redis 7: every option is checked before the expiry's number, and only the last one's.
  EXPECT_EQ(c_.Call({"SET", "k", "v", "EX", "abc", "NX", "XX"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"EXISTS", "k"}), ":0\r\n");  // nothing of a refused SET was stored
  EXPECT_EQ(c_.Call({"SET", "k", "v", "EX", "x", "EX", "300"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"TTL", "k"}), ":300\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "v", "EX", "0", "ex", "10"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"TTL", "k"}), ":10\r\n");
  EXPECT_EQ(c_.Call({"DEL", "k"}), ":1\r\n");
  const std::string long_key(17, 'k');
  EXPECT_EQ(c_.Call({"SET", long_key, "v"}), "-ERR key too long\r\n");
  EXPECT_EQ(c_.Call({"GET", long_key}), "-ERR key too long\r\n");
  EXPECT_EQ(c_.Call({"MGET", "a", long_key}), "-ERR key too long\r\n");
  EXPECT_EQ(c_.Call({"MSET", "a", "1", long_key, "2"}), "-ERR key too long\r\n");
  EXPECT_EQ(c_.Call({"EXISTS", long_key}), "-ERR key too long\r\n");
  EXPECT_EQ(c_.Call({"DEL", long_key}), "-ERR key too long\r\n");
  // Nothing of a refused MSET was stored.
  EXPECT_EQ(c_.Call({"GET", "a"}), "$-1\r\n");
  EXPECT_EQ(c_.Call({"SET", std::string(16, 'k'), "v"}), "+OK\r\n");
}

TEST_F(GenericCommandsTest, MsetMgetExistsDel) {
  EXPECT_EQ(c_.Call({"MSET", "a", "1", "b", "22"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"MSET", "a", "1", "b"}),
            "-ERR wrong number of arguments for 'mset' command\r\n");
  EXPECT_EQ(c_.Call({"MGET", "a", "nope", "b"}), "*3\r\n$1\r\n1\r\n$-1\r\n$2\r\n22\r\n");
  EXPECT_EQ(c_.Call({"EXISTS", "a", "b", "nope", "a"}), ":3\r\n");
  EXPECT_EQ(c_.Call({"DEL", "a", "nope"}), ":1\r\n");
  EXPECT_EQ(c_.Call({"DEL", "a"}), ":0\r\n");
  EXPECT_EQ(c_.Call({"EXISTS", "a", "b"}), ":1\r\n");
}

TEST_F(GenericCommandsTest, SetsGetsAndExistsAreTimedOnTheGenericPath) {
  using metrics::RequestOp;
  using metrics::RequestPath;
  EXPECT_EQ(c_.Call({"SET", "k", "v"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"MSET", "a", "1", "b", "2"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"GET", "k"}), "$1\r\nv\r\n");
  EXPECT_EQ(c_.Call({"GET", "nope"}), "$-1\r\n");
  EXPECT_EQ(c_.Call({"MGET", "a", "b"}), "*2\r\n$1\r\n1\r\n$1\r\n2\r\n");
  EXPECT_EQ(c_.Call({"EXISTS", "a", "nope"}), ":1\r\n");
  EXPECT_EQ(c_.Call({"DBSIZE"}), ":3\r\n");
  Server& server = ts_.server();
  EXPECT_EQ(TimedCommands(server, RequestOp::kPut, RequestPath::kGeneric, TierId::kHost), 2u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kGet, RequestPath::kGeneric, TierId::kHost), 2u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kGet, RequestPath::kGeneric, std::nullopt), 1u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kLookup, RequestPath::kGeneric, TierId::kHost), 1u);
  EXPECT_EQ(TimedCommands(server), 6u);  // DBSIZE is not
}

TEST_F(GenericCommandsTest, DbsizeCountsEveryBlock) {
  EXPECT_EQ(c_.Call({"DBSIZE"}), ":0\r\n");
  EXPECT_EQ(c_.Call({"MSET", "a", "1", "b", "2", "c", "3"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"DBSIZE"}), ":3\r\n");
  EXPECT_EQ(c_.Call({"DEL", "b"}), ":1\r\n");
  EXPECT_EQ(c_.Call({"DBSIZE"}), ":2\r\n");
}

TEST_F(GenericCommandsTest, AValueLargerThanTheTierIsRejected) {
  const std::string huge(size_t{65} << 20, 'x');  // the test tier holds 64 MiB
  const std::string reply = c_.Call({"SET", "huge", huge});
  EXPECT_EQ(reply.substr(0, 10), "-REJECTED ") << reply;
  EXPECT_EQ(c_.Call({"GET", "huge"}), "$-1\r\n");
}

// LMCache stores a 28-byte metadata record beside every chunk: such values share 4 KiB pages
// (64-byte slots) instead of taking a 4 KiB slot each. 20,000 of them fit in the test's 64 MiB
// host tier, which holds 16,384 values of one 4 KiB slot each.
TEST_F(GenericCommandsTest, TinyValuesArePackedNotGivenA4KiBSlotEach) {
  constexpr int kValues = 20'000;
  constexpr int kBatch = 1'000;
  const std::string record(28, 'm');
  for (int first = 0; first < kValues; first += kBatch) {
    std::vector<std::string> mset = {"MSET"};
    for (int i = first; i < first + kBatch; ++i) {
      mset.push_back("m" + std::to_string(i));
      mset.push_back(record);
    }
    ASSERT_EQ(c_.Call(mset), "+OK\r\n");
  }
  EXPECT_EQ(c_.Call({"DBSIZE"}), ":" + std::to_string(kValues) + "\r\n");
  EXPECT_EQ(ts_.store().Stats().evicted_blocks, 0u);
  EXPECT_EQ(c_.Call({"GET", "m0"}), Bulk(record));
  EXPECT_EQ(c_.Call({"GET", "m19999"}), Bulk(record));
  EXPECT_EQ(ts_.tier().Stats().used_bytes, uint64_t{kValues} * (record.size() + 1));
}

TEST_F(GenericCommandsTest, InfoSections) {
  const std::string all = c_.Call({"INFO"});
  ASSERT_EQ(all.substr(0, 1), "$");
  for (const char* section : {"# Server\r\n", "# Memory\r\n", "# Clients\r\n", "# Stats\r\n",
                              "# Keyspace\r\n", "# Kvtier\r\n"}) {
    EXPECT_NE(all.find(section), std::string::npos) << section;
  }
  EXPECT_NE(all.find("connected_clients:1\r\n"), std::string::npos);
  EXPECT_NE(all.find("blocked_clients:0\r\n"), std::string::npos);  // redis-cli --stat reads it
  EXPECT_NE(all.find("tier_host_capacity_bytes:67108864\r\n"), std::string::npos);

  EXPECT_EQ(c_.Call({"SET", "k", "v"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"INFO", "keyspace"}),
            Bulk("# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n"));
  EXPECT_EQ(c_.Call({"INFO", "nosuchsection"}), "$0\r\n\r\n");

  EXPECT_EQ(c_.Call({"HELLO", "3"}).substr(0, 4), "%7\r\n");
  const std::string text = "# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n";
  EXPECT_EQ(c_.Call({"INFO", "KEYSPACE"}),
            "=" + std::to_string(text.size() + 4) + "\r\ntxt:" + text + "\r\n");
}

// With a small in-flight limit MGET's reply is sent in pieces; the client sees one whole reply.
TEST(GenericCommandsFlowTest, MgetLargerThanTheInflightLimit) {
  ServerOptions o;
  o.max_inflight_bytes_per_client = 1000;
  TestServer ts(o);
  ASSERT_TRUE(ts.status().ok());
  TestClient c = ts.ConnectTcp();
  std::vector<std::string> mget = {"MGET"};
  std::string expected = "*20\r\n";
  for (int i = 0; i < 20; ++i) {
    const std::string key = "key" + std::to_string(i);
    const std::string value(600 + i, static_cast<char>('a' + i));
    ASSERT_EQ(c.Call({"SET", key, value}), "+OK\r\n");
    mget.push_back(key);
    expected += Bulk(value);
  }
  EXPECT_EQ(c.Call(mget), expected);
}

// Key names live in the daemon's memory, not in the host tier: long names with tiny values are
// bounded by limits.max_generic_name_bytes, not by the tier's capacity.
TEST(GenericCommandsNamesTest, NewKeysPastTheNameBudgetAreRefusedAndOldOnesStillChange) {
  ServerOptions options;
  options.max_generic_name_bytes = 4096;
  TestServer ts(options);
  ASSERT_TRUE(ts.status().ok()) << ts.status().ToString();
  TestClient c = ts.ConnectUnix();
  const std::string name(1000, 'k');
  int stored = 0;
  for (char last = 'a'; last <= 'z'; ++last) {
    const std::string reply = c.Call({"SET", name + last, ""});
    if (reply != "+OK\r\n") {
      EXPECT_EQ(reply.substr(0, 5), "-BUSY") << reply;
      EXPECT_NE(reply.find("limits.max_generic_name_bytes"), std::string::npos) << reply;
      break;
    }
    ++stored;
  }
  EXPECT_EQ(stored, 4) << "4 names of 1,001 bytes fit in 4,096";
  EXPECT_EQ(c.Call({"SET", name + 'a', "changed"}), "+OK\r\n") << "an existing key";
  EXPECT_EQ(c.Call({"GET", name + 'a'}), "$7\r\nchanged\r\n");
  EXPECT_EQ(c.Call({"DEL", name + 'b'}), ":1\r\n");
  EXPECT_EQ(c.Call({"SET", name + 'y', "v"}), "+OK\r\n") << "room again after a DEL";
}

// Regression: SET removed the old value before it reserved the new one's room, so a put that had
// to wait for the mover (the host tier full, NVMe below) came back to a key already gone: SET XX
// answered nil (and had deleted the key), SET GET lost the old value, SET KEEPTTL stored the new
// value without the old expiry. Nothing runs the mover here, so the wait ends in BUSY.
TEST(GenericCommandsMoverTest, ASetThatWaitsForRoomLeavesTheOldValueAsItWas) {
  ServerOptions options;
  options.mover_wait_ms = 50;
  store::StoreOptions store_options;
  store_options.background_disk_moves = true;
  TestServer ts(options, store_options,
                std::make_unique<::kvtier::testing::FakeTier>(TierId::kNvme, 256 << 20,
                                                              /*addressable=*/false));
  ASSERT_TRUE(ts.status().ok()) << ts.status().ToString();
  TestClient c = ts.ConnectUnix();
  ASSERT_EQ(c.Call({"SET", "k", "old", "PX", "100000"}), "+OK\r\n");
  // A neighbour in the same slab of small values: removing k alone frees no slab for the new value.
  ASSERT_EQ(c.Call({"SET", "neighbour", "n"}), "+OK\r\n");
  // Fill the 64 MiB host tier with 1 MiB values until a put has to wait for room.
  const std::string filler(1 << 20, 'f');
  int stored = 0;
  std::string refused;
  while (stored < 128) {
    refused = c.Call({"SET", "f" + std::to_string(stored), filler});
    if (refused != "+OK\r\n") break;
    ++stored;
  }
  ASSERT_LT(stored, 128) << "the host tier never filled";
  ASSERT_EQ(refused.substr(0, 5), "-BUSY") << refused;
  const std::string big(2 << 20, 'n');  // a size class with no free slot
  for (const char* option : {"XX", "GET", "KEEPTTL"}) {
    SCOPED_TRACE(option);
    EXPECT_EQ(c.Call({"SET", "k", big, option}).substr(0, 5), "-BUSY");
    EXPECT_TRUE(c.Call({"GET", "k"}) == Bulk("old")) << "the old value is kept";
    const std::string pttl = c.Call({"PTTL", "k"});
    EXPECT_NE(pttl, ":-1\r\n") << "the old expiry is kept";
    EXPECT_NE(pttl, ":-2\r\n") << "the key is kept";
  }
}

}  // namespace
}  // namespace kvtier::server
