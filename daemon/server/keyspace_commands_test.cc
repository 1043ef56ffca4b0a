// SET's options and the key-space commands (SCAN, KEYS, TYPE, TTL, EXPIRE, PERSIST, FLUSHDB), byte
// for byte, as Redis 7 answers them. tests/integration/test_redis_compat.py runs the same calls
// against a real redis-server and compares.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "daemon/server/generic_keyspace.h"
#include "daemon/server/test_client.h"

namespace kvtier::server {
namespace {

using testing::Bulk;
using testing::ParseReply;
using testing::TestClient;
using testing::TestServer;
using testing::WaitFor;

constexpr const char* kNull = "$-1\r\n";

class KeyspaceCommandsTest : public ::testing::Test {
 protected:
  static ServerOptions Options() {
    ServerOptions o;
    o.max_keys_reply = 50;
    return o;
  }
  void SetUp() override {
    ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString();
    c_ = ts_.ConnectUnix();
    ASSERT_TRUE(c_.connected());
  }
  int64_t Integer(std::initializer_list<std::string_view> args) {
    const resp::Reply r = ParseReply(c_.Call(args));
    EXPECT_EQ(r.type, resp::ReplyType::kInteger) << r.str;
    return r.integer;
  }
  // TTL of `key` is `seconds`, or a second less when this machine was slow in between.
  void ExpectTtl(const std::string& key, int64_t seconds) {
    const int64_t ttl = Integer({"TTL", key});
    EXPECT_TRUE(ttl == seconds || ttl == seconds - 1) << key << ": " << ttl;
  }
  // Every name a full SCAN iteration returns, each call asking for `count` entries.
  std::multiset<std::string> ScanAll(const std::vector<std::string>& options, int* calls) {
    std::multiset<std::string> names;
    std::string cursor = "0";
    *calls = 0;
    do {
      std::vector<std::string> cmd = {"SCAN", cursor};
      cmd.insert(cmd.end(), options.begin(), options.end());
      const resp::Reply r = ParseReply(c_.Call(cmd));
      EXPECT_EQ(r.elements.size(), 2u);
      if (r.elements.size() != 2) break;
      cursor = r.elements[0].str;
      for (const resp::Reply& name : r.elements[1].elements) names.insert(name.str);
    } while (cursor != "0" && ++*calls < 100'000);
    return names;
  }
  TestServer ts_{Options()};
  TestClient c_;
};

TEST_F(KeyspaceCommandsTest, SetNxXxAndGet) {
  EXPECT_EQ(c_.Call({"SET", "k", "1", "XX"}), kNull);
  EXPECT_EQ(c_.Call({"EXISTS", "k"}), ":0\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "1", "NX"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"SET", "k", "2", "NX"}), kNull);
  EXPECT_EQ(c_.Call({"GET", "k"}), Bulk("1"));
  EXPECT_EQ(c_.Call({"SET", "k", "3", "XX", "GET"}), Bulk("1"));
  EXPECT_EQ(c_.Call({"SET", "k", "4", "NX", "GET"}), Bulk("3"));  // kept, old value answered
  EXPECT_EQ(c_.Call({"GET", "k"}), Bulk("3"));
  EXPECT_EQ(c_.Call({"SET", "new", "v", "GET"}), kNull);
  EXPECT_EQ(c_.Call({"GET", "new"}), Bulk("v"));
  EXPECT_EQ(c_.Call({"SET", "k", "5", "xx", "get", "nx"}), "-ERR syntax error\r\n");
}

TEST_F(KeyspaceCommandsTest, SetExpiryOptionsAndKeepTtl) {
  EXPECT_EQ(c_.Call({"SET", "k", "v", "EX", "100"}), "+OK\r\n");
  ExpectTtl("k", 100);
  EXPECT_EQ(c_.Call({"SET", "k", "v", "EX", "10", "EX", "20"}), "+OK\r\n");  // the last wins
  ExpectTtl("k", 20);
  const int64_t pttl = Integer({"PTTL", "k"});
  EXPECT_GT(pttl, 19'000);
  EXPECT_LE(pttl, 20'000);
  EXPECT_EQ(c_.Call({"SET", "k", "w", "KEEPTTL"}), "+OK\r\n");
  ExpectTtl("k", 20);
  EXPECT_EQ(c_.Call({"SET", "k", "x"}), "+OK\r\n");  // a plain SET drops the expiry
  EXPECT_EQ(Integer({"TTL", "k"}), -1);
  EXPECT_EQ(c_.Call({"SET", "k", "y", "PXAT", "1"}), "+OK\r\n");  // already past: gone
  EXPECT_EQ(c_.Call({"GET", "k"}), kNull);
  EXPECT_EQ(Integer({"TTL", "k"}), -2);
}

TEST_F(KeyspaceCommandsTest, ExpireTtlPersist) {
  EXPECT_EQ(Integer({"EXPIRE", "nope", "10"}), 0);
  EXPECT_EQ(Integer({"TTL", "nope"}), -2);
  EXPECT_EQ(Integer({"PTTL", "nope"}), -2);
  ASSERT_EQ(c_.Call({"SET", "k", "v"}), "+OK\r\n");
  EXPECT_EQ(Integer({"TTL", "k"}), -1);
  EXPECT_EQ(Integer({"PERSIST", "k"}), 0);
  EXPECT_EQ(Integer({"EXPIRE", "k", "100", "XX"}), 0);
  EXPECT_EQ(Integer({"EXPIRE", "k", "100", "GT"}), 0);  // no expiry counts as later
  EXPECT_EQ(Integer({"EXPIRE", "k", "100", "NX"}), 1);
  EXPECT_EQ(Integer({"EXPIRE", "k", "200", "NX"}), 0);
  EXPECT_EQ(Integer({"EXPIRE", "k", "50", "GT"}), 0);
  EXPECT_EQ(Integer({"EXPIRE", "k", "50", "LT"}), 1);
  ExpectTtl("k", 50);
  EXPECT_EQ(Integer({"PEXPIRE", "k", "300000"}), 1);
  ExpectTtl("k", 300);
  EXPECT_EQ(c_.Call({"EXPIRE", "k", "10", "NX", "XX"}),
            "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n");
  EXPECT_EQ(c_.Call({"EXPIRE", "k", "10", "GT", "LT"}),
            "-ERR GT and LT options at the same time are not compatible\r\n");
  EXPECT_EQ(c_.Call({"EXPIRE", "k", "soon"}), "-ERR value is not an integer or out of range\r\n");
  ExpectTtl("k", 300);  // a refused EXPIRE changes nothing
  EXPECT_EQ(c_.Call({"EXPIRE", "k", "9223372036854775807"}),
            "-ERR invalid expire time in 'expire' command\r\n");
  EXPECT_EQ(Integer({"PERSIST", "k"}), 1);
  EXPECT_EQ(Integer({"TTL", "k"}), -1);
  EXPECT_EQ(Integer({"EXPIRE", "k", "-5"}), 1);  // a past time deletes the key
  EXPECT_EQ(c_.Call({"GET", "k"}), kNull);
  EXPECT_EQ(Integer({"EXPIRE", "k", "10"}), 0);
  ASSERT_EQ(c_.Call({"SET", "k", "v"}), "+OK\r\n");
  EXPECT_EQ(Integer({"PEXPIREAT", "k", "1"}), 1);
  EXPECT_EQ(Integer({"EXISTS", "k"}), 0);
}

// STRLEN answers from the index (redis-cli --bigkeys sizes strings with it): the value's bytes, 0
// for a key that does not exist or whose time is up.
TEST_F(KeyspaceCommandsTest, StrLenIsTheValuesLength) {
  ASSERT_EQ(c_.Call({"SET", "small", "seven b"}), "+OK\r\n");
  ASSERT_EQ(c_.Call({"SET", "large", testing::Value(2000, 'l')}), "+OK\r\n");
  ASSERT_EQ(c_.Call({"SET", "gone", "v", "PX", "1"}), "+OK\r\n");
  EXPECT_EQ(Integer({"STRLEN", "small"}), 7);
  EXPECT_EQ(Integer({"STRLEN", "large"}), 2000);
  EXPECT_EQ(Integer({"STRLEN", "missing"}), 0);
  EXPECT_TRUE(WaitFor([&] { return Integer({"STRLEN", "gone"}) == 0; }));
  EXPECT_EQ(c_.Call({"STRLEN"}), "-ERR wrong number of arguments for 'strlen' command\r\n");
}

// MEMORY USAGE (redis-cli --memkeys): the bytes the value takes in its tier (the host tier here:
// the slot of the value and its 1-byte header) plus the key's name; nil for a key that does not
// exist. Arguments and errors as Redis 7's.
TEST_F(KeyspaceCommandsTest, MemoryUsageIsTheValuesBytesInItsTierAndTheName) {
  ASSERT_EQ(c_.Call({"SET", "small", "seven b"}), "+OK\r\n");
  ASSERT_EQ(c_.Call({"SET", "large", testing::Value(5000, 'l')}), "+OK\r\n");
  EXPECT_EQ(Integer({"MEMORY", "USAGE", "small"}), 64 + 5);  // a 64-byte small slot
  EXPECT_EQ(Integer({"memory", "usage", "large", "SAMPLES", "0"}), 8192 + 5);  // two pages
  EXPECT_EQ(Integer({"MEMORY", "USAGE", "large", "SAMPLES", "5", "samples", "6"}), 8192 + 5);
  EXPECT_EQ(c_.Call({"MEMORY", "USAGE", "missing"}), kNull);
  EXPECT_EQ(c_.Call({"MEMORY", "USAGE", "small", "SAMPLES"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"MEMORY", "USAGE", "small", "SAMPLES", "-1"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"MEMORY", "USAGE", "small", "SAMPLES", "x"}),
            "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(c_.Call({"MEMORY", "USAGE"}),
            "-ERR wrong number of arguments for 'memory|usage' command\r\n");
  EXPECT_EQ(c_.Call({"MEMORY", "DOCTOR"}),
            "-ERR unknown subcommand 'DOCTOR'. Try MEMORY HELP.\r\n");
  EXPECT_EQ(c_.Call({"MEMORY"}), "-ERR wrong number of arguments for 'memory' command\r\n");
}

// An expired value is a miss at once, and the expiry sweep gives its space back without anyone
// reading it.
TEST_F(KeyspaceCommandsTest, ExpiredValuesAreMissesAndTheSweepFreesThem) {
  const std::string value = testing::Value(256 << 10, 'e');
  ASSERT_EQ(c_.Call({"SET", "read", value, "PX", "1"}), "+OK\r\n");
  ASSERT_EQ(c_.Call({"SET", "unread", value, "PX", "1"}), "+OK\r\n");
  ASSERT_EQ(c_.Call({"SET", "kept", "v"}), "+OK\r\n");
  ASSERT_TRUE(WaitFor([&] { return c_.Call({"GET", "read"}) == kNull; }));
  EXPECT_EQ(Integer({"EXISTS", "read"}), 0);
  EXPECT_EQ(c_.Call({"TYPE", "read"}), "+none\r\n");
  // "unread" is never named again: only the sweep can remove it.
  EXPECT_TRUE(WaitFor([&] { return c_.Call({"DBSIZE"}) == ":1\r\n"; }));
  EXPECT_LT(ts_.tier().Stats().used_bytes, value.size());  // both values' space is free again
  EXPECT_EQ(c_.Call({"TYPE", "kept"}), "+string\r\n");
  EXPECT_EQ(c_.Call({"SET", "read", "again", "NX"}), "+OK\r\n");  // an expired key is absent
}

TEST_F(KeyspaceCommandsTest, ScanListsEveryLiveKeyOnceWithMatchCountAndType) {
  std::multiset<std::string> all;
  for (int i = 0; i < 200; ++i) {
    const std::string key = (i % 2 == 0 ? "even:" : "odd:") + std::to_string(i);
    ASSERT_EQ(c_.Call({"SET", key, "v"}), "+OK\r\n");
    all.insert(key);
  }
  ASSERT_EQ(Integer({"DEL", "even:0", "odd:1"}), 2);
  all.erase("even:0");
  all.erase("odd:1");
  int calls = 0;
  EXPECT_EQ(ScanAll({"COUNT", "7"}, &calls), all);
  EXPECT_GE(calls, 198 / 7);
  std::multiset<std::string> odd;
  for (const std::string& k : all) {
    if (k.starts_with("odd:")) odd.insert(k);
  }
  EXPECT_EQ(ScanAll({"MATCH", "odd:*", "COUNT", "40"}, &calls), odd);
  EXPECT_GE(calls, 198 / 40);
  // A COUNT past limits.max_keys_reply (50) is held to it: one call cannot take the whole key
  // space, which KEYS refuses to send.
  const resp::Reply big = ParseReply(c_.Call({"SCAN", "0", "COUNT", "1000000"}));
  ASSERT_EQ(big.elements.size(), 2u);
  EXPECT_NE(big.elements[0].str, "0");
  EXPECT_LE(big.elements[1].elements.size(), 50u);
  EXPECT_EQ(ScanAll({"COUNT", "1000000"}, &calls), all);
  EXPECT_GE(calls, 198 / 50);
  EXPECT_EQ(ScanAll({"MATCH", "o?d:1[0-9]", "TYPE", "STRING"}, &calls).size(), 5u);
  EXPECT_TRUE(ScanAll({"TYPE", "hash"}, &calls).empty());
  EXPECT_EQ(c_.Call({"SCAN", "x"}), "-ERR invalid cursor\r\n");
  EXPECT_EQ(c_.Call({"SCAN", "0", "COUNT", "0"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"SCAN", "0", "MATCH"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"SCAN", "0", "SORT", "x"}), "-ERR syntax error\r\n");
}

// Redis' guarantee: a key present from the start to the end of an iteration is returned, however
// the key space changes meanwhile.
TEST_F(KeyspaceCommandsTest, ScanReturnsKeysPresentThroughoutWhileOthersComeAndGo) {
  std::set<std::string> stable;
  for (int i = 0; i < 100; ++i) {
    const std::string key = "stable:" + std::to_string(i);
    ASSERT_EQ(c_.Call({"SET", key, "v"}), "+OK\r\n");
    stable.insert(key);
  }
  std::set<std::string> seen;
  std::string cursor = "0";
  int round = 0;
  do {
    const resp::Reply r = ParseReply(c_.Call({"SCAN", cursor, "COUNT", "5"}));
    ASSERT_EQ(r.elements.size(), 2u);
    cursor = r.elements[0].str;
    for (const resp::Reply& name : r.elements[1].elements) seen.insert(name.str);
    // Churn: keys added and removed between the calls.
    const std::string churn = "churn:" + std::to_string(round++);
    ASSERT_EQ(c_.Call({"SET", churn, "v"}), "+OK\r\n");
    if (round % 2 == 0) {
      ASSERT_EQ(Integer({"DEL", "churn:" + std::to_string(round - 2)}), 1);
    }
  } while (cursor != "0" && round < 10'000);
  for (const std::string& key : stable) EXPECT_TRUE(seen.contains(key)) << key;
}

TEST_F(KeyspaceCommandsTest, KeysListsMatchesAndIsRefusedAboveTheLimit) {
  for (const char* key : {"hello", "hallo", "hxllo", "other"}) {
    ASSERT_EQ(c_.Call({"SET", key, "v"}), "+OK\r\n");
  }
  const resp::Reply r = ParseReply(c_.Call({"KEYS", "h[ae]llo"}));
  std::set<std::string> names;
  for (const resp::Reply& name : r.elements) names.insert(name.str);
  EXPECT_EQ(names, (std::set<std::string>{"hello", "hallo"}));
  for (int i = 0; i < 60; ++i) ASSERT_EQ(c_.Call({"SET", "k" + std::to_string(i), "v"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"KEYS", "*"}),
            "-ERR KEYS refused: the key space holds 64 keys, more than limits.max_keys_reply "
            "(50); use SCAN\r\n");
}

TEST_F(KeyspaceCommandsTest, TypeUnlinkAndFlush) {
  ASSERT_EQ(c_.Call({"MSET", "a", "1", "b", "2", "c", "3"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"TYPE", "a"}), "+string\r\n");
  EXPECT_EQ(c_.Call({"TYPE", "nope"}), "+none\r\n");
  EXPECT_EQ(Integer({"UNLINK", "a", "a", "nope"}), 1);
  EXPECT_EQ(c_.Call({"FLUSHDB", "NOW"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c_.Call({"FLUSHALL", "ASYNC", "SYNC"}), "-ERR syntax error\r\n");
  EXPECT_EQ(Integer({"DBSIZE"}), 2);
  EXPECT_EQ(c_.Call({"FLUSHDB", "ASYNC"}), "+OK\r\n");
  EXPECT_EQ(Integer({"DBSIZE"}), 0);
  EXPECT_EQ(c_.Call({"GET", "b"}), kNull);
  EXPECT_EQ(c_.Call({"KEYS", "*"}), "*0\r\n");
  ASSERT_EQ(c_.Call({"SET", "d", "4"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"FLUSHALL"}), "+OK\r\n");
  EXPECT_EQ(Integer({"EXISTS", "d"}), 0);
}

// A value the store evicted for room is not listed, and its entry goes.
TEST_F(KeyspaceCommandsTest, EvictedValuesAreNotListed) {
  const std::string value = testing::Value(4 << 20, 'v');  // the test tier holds 64 MiB
  for (int i = 0; i < 24; ++i) {
    ASSERT_EQ(c_.Call({"SET", "big:" + std::to_string(i), value}), "+OK\r\n");
  }
  // SCAN first: it must drop the entries of the evicted values itself.
  int calls = 0;
  const std::multiset<std::string> listed = ScanAll({"COUNT", "3"}, &calls);
  std::multiset<std::string> present;
  for (int i = 0; i < 24; ++i) {
    const std::string key = "big:" + std::to_string(i);
    if (Integer({"EXISTS", key}) == 1) present.insert(key);
  }
  ASSERT_LT(present.size(), 24u);
  ASSERT_GT(present.size(), 0u);
  EXPECT_EQ(listed, present);
}

// While a restart adopts the blocks it found on NVMe, a key whose entry (read back from the
// key-names file) has expired but whose block has not joined the index yet keeps its entry: when
// the block comes, it is removed, not served as a key without an expiry.
TEST_F(KeyspaceCommandsTest, AKeyThatExpiredBeforeItsBlockIsAdoptedStaysExpired) {
  const std::string value = "v";
  ASSERT_EQ(c_.Call({"SET", "k", value, "PX", "1"}), "+OK\r\n");
  store::Store& store = ts_.store();
  const NamespaceId ns = GenericNamespaceId();
  const BlockKey block = GenericKey(ns, "k");
  // The block leaves the index behind the table's back, as if not adopted yet (removed before
  // adoption starts: a removal during it would refuse the block's adoption); the entry's time
  // (1 ms) passes meanwhile.
  ASSERT_TRUE(store.Remove(ns, block).ok());
  store.SetPendingAdoptions(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(c_.Call({"GET", "k"}), kNull);
  EXPECT_EQ(Integer({"EXISTS", "k"}), 0);
  // Adoption reaches the block, then ends. The expired key's removal on the way (above) refuses
  // its recovered copy.
  std::string stored(1, static_cast<char>(kGenericValueFormat));
  stored += value;
  EXPECT_EQ(ts_.PlaceBlock(TierId::kHost, ns, block, std::as_bytes(std::span(stored))).code(),
            StatusCode::kRejected);
  store.SetPendingAdoptions(0);
  EXPECT_EQ(c_.Call({"GET", "k"}), kNull);
  EXPECT_EQ(Integer({"TTL", "k"}), -2);
  EXPECT_EQ(Integer({"DBSIZE"}), 0);  // its value was removed on the way
}

}  // namespace
}  // namespace kvtier::server
