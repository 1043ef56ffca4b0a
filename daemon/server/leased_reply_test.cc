// Large values go out straight from their leased slot (LeasedPayload, commands.h): the bytes are
// right, the lease ends once they are sent, a writer of the same key waits for the reader instead
// of failing, and a lease that lapses mid-send cuts the reply short instead of completing it.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <string>
#include <thread>

#include "daemon/server/generic_keyspace.h"
#include "daemon/server/test_client.h"
#include "tests/fakes/fake_tier.h"

namespace kvtier::server {
namespace {

using namespace std::chrono_literals;
using testing::Bulk;
using testing::SameReply;
using testing::TestClient;
using testing::TestServer;
using testing::Value;

// A reader that takes its bytes slowly: a small receive buffer, so the server's write of a
// multi-MiB value blocks part way until the test reads.
TestClient SlowReader(TestServer& ts) {
  TestClient c = ts.ConnectUnix();
  int bytes = 64 << 10;
  setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  return c;
}

class LeasedReplyTest : public ::testing::Test {
 protected:
  static ServerOptions Options() {
    ServerOptions o;
    o.reader_wait_ms = 60'000;  // longer than any test: a wait ends because the reader finished
    return o;
  }
  void SetUp() override {
    ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString();
    c_ = ts_.ConnectUnix();
  }
  uint64_t LeasesOpen() { return ts_.store().Stats().leases_active; }

  // Values of several sizes each take whole slabs of the host tier: room for all of them.
  TestServer ts_{Options(), /*with_arena=*/true, /*capacity_bytes=*/uint64_t{512} << 20};
  TestClient c_;
};

TEST_F(LeasedReplyTest, LargeValuesArriveWholeAndTheirLeasesEnd) {
  const std::string big = Value(3 << 20, 'a');
  const std::string edge = Value(64 << 10, 'b');  // exactly the threshold
  ASSERT_EQ(c_.Call({"SET", "big", big}), "+OK\r\n");
  ASSERT_EQ(c_.Call({"SET", "edge", edge}), "+OK\r\n");
  ASSERT_EQ(c_.Call({"SET", "small", "s"}), "+OK\r\n");
  EXPECT_TRUE(SameReply(c_.Call({"GET", "big"}), Bulk(big)));
  EXPECT_TRUE(SameReply(c_.Call({"MGET", "small", "big", "missing", "edge", "big"}),
                        "*5\r\n" + Bulk("s") + Bulk(big) + "$-1\r\n" + Bulk(edge) + Bulk(big)));
  EXPECT_TRUE(ts_.WaitForLeases(0));
}

TEST_F(LeasedReplyTest, PipelinedGetThenSetOfTheSameKeyDoesNotWaitForItself) {
  const std::string old_value = Value(2 << 20, 'c');
  ASSERT_EQ(c_.Call({"SET", "k", old_value}), "+OK\r\n");
  // One batch: the GET's payload is still queued on this connection when the SET runs.
  ASSERT_TRUE(
      c_.Send("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
              "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nnew\r\n"
              "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"));
  EXPECT_TRUE(SameReply(c_.ReadReply(), Bulk(old_value)));
  EXPECT_EQ(c_.ReadReply(), "+OK\r\n");
  EXPECT_EQ(c_.ReadReply(), Bulk("new"));
  EXPECT_TRUE(ts_.WaitForLeases(0));
}

TEST_F(LeasedReplyTest, SetWaitsForAReaderStillReceivingTheOldValue) {
  const std::string old_value = Value(8 << 20, 'e');
  ASSERT_EQ(c_.Call({"SET", "k", old_value}), "+OK\r\n");
  TestClient reader = SlowReader(ts_);
  ASSERT_TRUE(reader.Send("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"));
  // The reader's GET has leased the value once its connection holds the lease.
  for (int i = 0; i < 1000 && LeasesOpen() == 0; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(LeasesOpen(), 1u);
  ASSERT_TRUE(c_.Send("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nnew\r\n"));
  EXPECT_EQ(c_.ReadReply(100ms), "");                           // waiting, not failing
  EXPECT_TRUE(SameReply(reader.ReadReply(), Bulk(old_value)));  // the old bytes, whole
  EXPECT_EQ(c_.ReadReply(), "+OK\r\n");
  EXPECT_EQ(c_.Call({"GET", "k"}), Bulk("new"));
}

TEST_F(LeasedReplyTest, LapsedLeaseCutsTheReplyShortAndCloses) {
  const std::string value = Value(8 << 20, 'f');
  ASSERT_EQ(c_.Call({"SET", "k", value}), "+OK\r\n");
  TestClient reader = SlowReader(ts_);
  ASSERT_TRUE(reader.Send("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"));
  for (int i = 0; i < 1000 && LeasesOpen() == 0; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(LeasesOpen(), 1u);
  // The reader stalls past the lease timeout; the store takes the lease back, and a writer may
  // now reuse the slot.
  ts_.clock().AdvanceMicros(31'000'000);
  ASSERT_EQ(ts_.store().ExpireDeadlines(), 1u);
  EXPECT_EQ(c_.Call({"SET", "k", "replaced"}), "+OK\r\n");
  bool closed = false;
  const std::string got = reader.ReadUntilClosed(&closed);
  EXPECT_TRUE(closed);
  const std::string whole = Bulk(value);
  EXPECT_LT(got.size(), whole.size());  // never the complete reply
  EXPECT_EQ(ts_.server().Stats().lapsed_reply_leases, 1u);
  EXPECT_EQ(c_.Call({"GET", "k"}), Bulk("replaced"));
}

// A reader that stops taking a large reply is disconnected within payload_send_timeout_ms, before
// the value's lease could lapse and its slot take another block: what it got is a prefix of the
// value's reply, and the lease is back without waiting for its deadline.
TEST(LeasedReplyStallTest, AReaderThatStopsTakingTheReplyIsClosedBeforeItsLeaseCouldLapse) {
  ServerOptions o;
  o.payload_send_timeout_ms = 200;
  TestServer ts(o, /*with_arena=*/true, /*capacity_bytes=*/uint64_t{64} << 20);
  ASSERT_TRUE(ts.status().ok()) << ts.status().ToString();
  TestClient c = ts.ConnectUnix();
  const std::string value = Value(8 << 20, 'g');
  ASSERT_EQ(c.Call({"SET", "k", value}), "+OK\r\n");
  TestClient reader = SlowReader(ts);
  ASSERT_TRUE(reader.Send("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"));
  for (int i = 0; i < 1000 && ts.store().Stats().leases_active == 0; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(ts.store().Stats().leases_active, 1u);
  // The reader takes nothing; the store's clock stands still, so the lease never lapses here:
  // only the send's own timeout can end it.
  EXPECT_TRUE(ts.WaitForLeases(0)) << "the stalled reply still holds its lease";
  bool closed = false;
  const std::string got = reader.ReadUntilClosed(&closed);
  EXPECT_TRUE(closed);
  const std::string whole = Bulk(value);
  EXPECT_LT(got.size(), whole.size());
  EXPECT_EQ(got, whole.substr(0, got.size())) << "only the value's own bytes";
  EXPECT_EQ(ts.server().Stats().stalled_reply_closes, 1u);
  EXPECT_EQ(ts.server().Stats().lapsed_reply_leases, 0u);
  // (A reader that keeps up is served whole: LargeValuesArriveWholeAndTheirLeasesEnd, with the
  // default timeout; 200 ms per 4 MiB piece is too short for a build with sanitizers.)
  EXPECT_EQ(c.Call({"EXISTS", "k"}), ":1\r\n") << "the value stays";
}

// Reads exactly `n` bytes of a reply (fewer if the connection ends or 10 s pass).
std::string ReadBytes(TestClient& c, size_t n) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  char buf[64 << 10];
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    const ssize_t r = recv(c.fd(), buf, std::min(sizeof buf, n - got.size()), MSG_DONTWAIT);
    if (r == 0) break;
    if (r < 0) {
      std::this_thread::sleep_for(1ms);
      continue;
    }
    got.append(buf, static_cast<size_t>(r));
  }
  return got;
}

// A payload queued behind a large one that the client takes slowly keeps its lease until its
// turn: the leases of queued payloads are renewed while the one ahead is sent (only the payload
// being sent was, and MGET of a large value and another one lost the second's lease, and the
// connection, to a reader slower than the lease time).
TEST(LeasedReplyQueueTest, APayloadQueuedBehindASlowOneKeepsItsLease) {
  ServerOptions o;
  o.payload_send_timeout_ms = 3'000;  // queued leases are renewed at most every 1.5 s
  TestServer ts(o, /*with_arena=*/true, /*capacity_bytes=*/uint64_t{64} << 20);
  ASSERT_TRUE(ts.status().ok()) << ts.status().ToString();
  TestClient c = ts.ConnectUnix();
  const std::string first = Value(8 << 20, 'h');  // two 4 MiB pieces
  const std::string second = Value(128 << 10, 'i');
  ASSERT_EQ(c.Call({"SET", "a", first}), "+OK\r\n");
  ASSERT_EQ(c.Call({"SET", "b", second}), "+OK\r\n");
  TestClient reader = SlowReader(ts);
  ASSERT_TRUE(reader.Send("*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n"));
  for (int i = 0; i < 1000 && ts.store().Stats().leases_active < 2; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(ts.store().Stats().leases_active, 2u);
  // 20 s of the leases' 30 pass while the reader takes the first piece, slowly.
  ts.clock().AdvanceMicros(20'000'000);
  std::this_thread::sleep_for(1600ms);
  const std::string whole = "*2\r\n" + Bulk(first) + Bulk(second);
  std::string got = ReadBytes(reader, (4 << 20) + 64);
  std::this_thread::sleep_for(200ms);  // the second piece's send begins: both leases renewed
  ts.clock().AdvanceMicros(20'000'000);
  EXPECT_EQ(ts.store().ExpireDeadlines(), 0u) << "the queued value's lease lapsed";
  got += ReadBytes(reader, whole.size() - got.size());
  EXPECT_TRUE(SameReply(got, whole));
  EXPECT_EQ(ts.server().Stats().lapsed_reply_leases, 0u);
  EXPECT_TRUE(ts.WaitForLeases(0));
}

// A reply queued ahead of one that waits for its write-through copy (nvme.write_through, up to
// limits.mover_wait_ms) keeps its value's lease while it waits unsent: `GET big` pipelined with
// `SET k v` lost the GET's lease, and the connection, when the wait outlasted the lease. Nothing
// runs the mover here until the test does its work.
TEST(LeasedReplyQueueTest, AReplyWaitingBehindAWriteThroughKeepsItsLease) {
  ServerOptions o;
  o.mover_wait_ms = 10'000;
  o.payload_send_timeout_ms = 400;  // queued leases are renewed at most every 200 ms
  store::StoreOptions store_options;
  store_options.background_disk_moves = true;
  store_options.nvme_write_through = true;
  TestServer ts(o, store_options,
                std::make_unique<::kvtier::testing::FakeTier>(TierId::kNvme, 4 << 20,
                                                              /*addressable=*/false));
  ASSERT_TRUE(ts.status().ok()) << ts.status().ToString();
  TestClient c = ts.ConnectUnix();
  const std::string big = Value(256 << 10, 'j');
  ASSERT_TRUE(c.Send(testing::Resp({"SET", "big", big})));
  ASSERT_TRUE(testing::WaitFor([&] { return ts.store().Stats().committed_puts == 1; }));
  ts.store().WriteThrough(ts.store().TakeWriteThroughRequests(8));
  ASSERT_EQ(c.ReadReply(), "+OK\r\n");
  ASSERT_TRUE(c.Send(testing::Resp({"GET", "big"}) + testing::Resp({"SET", "k", "v"})));
  ASSERT_TRUE(testing::WaitFor([&] {
    return ts.store().Stats().committed_puts == 2 && ts.store().Stats().leases_active == 1;
  }));
  // 20 s of the lease's 30 pass while the SET waits; the wait renews the GET's lease.
  // (Renewals come at most every 200 ms; 2 s leaves a loaded machine room for several.)
  ts.clock().AdvanceMicros(20'000'000);
  std::this_thread::sleep_for(2s);
  ts.clock().AdvanceMicros(20'000'000);
  EXPECT_EQ(ts.store().ExpireDeadlines(), 0u) << "the waiting reply's lease lapsed";
  ts.store().WriteThrough(ts.store().TakeWriteThroughRequests(8));
  EXPECT_TRUE(SameReply(c.ReadReply(), Bulk(big)));
  EXPECT_EQ(c.ReadReply(), "+OK\r\n");
  EXPECT_EQ(ts.server().Stats().lapsed_reply_leases, 0u);
  EXPECT_TRUE(ts.WaitForLeases(0));
}

// Key "k" holds "old", which another client reads (its lease held) for longer than the server
// waits for readers (kReaderWaitMs).
template <uint64_t kReaderWaitMs>
class ValueReadElsewhereTest : public ::testing::Test {
 protected:
  static ServerOptions Options() {
    ServerOptions o;
    o.reader_wait_ms = kReaderWaitMs;
    return o;
  }
  void SetUp() override {
    ASSERT_TRUE(ts.status().ok());
    c = ts.ConnectUnix();
    ASSERT_EQ(c.Call({"SET", "k", "old"}), "+OK\r\n");
    lease = ts.store().Acquire(ns, GenericKey(ns, "k"));
    ASSERT_TRUE(lease.ok());
  }
  TestServer ts{Options()};
  TestClient c;
  const NamespaceId ns = GenericNamespaceId();
  Result<store::Lease> lease = Status(StatusCode::kNotFound, "not acquired yet");
};
using LeasedReplyWaitTest = ValueReadElsewhereTest<50>;
// A wait long enough to count its attempts.
using LeasedReplyRetryTest = ValueReadElsewhereTest<1000>;

TEST_F(LeasedReplyWaitTest, WriterGivesUpAfterReaderWaitAndDelLeavesTheKey) {
  EXPECT_EQ(c.Call({"SET", "k", "new"}),
            "-BUSY the old value is still being read by another client\r\n");
  EXPECT_EQ(c.Call({"MSET", "a", "1", "k", "new", "b", "2"}),
            "-BUSY the old value is still being read by another client\r\n");
  EXPECT_EQ(c.Call({"DEL", "a", "k", "b"}), ":2\r\n");
  EXPECT_EQ(c.Call({"GET", "k"}), Bulk("old"));
  ASSERT_TRUE(ts.store().Release(lease->id).ok());
  EXPECT_EQ(c.Call({"SET", "k", "new"}), "+OK\r\n");
  EXPECT_EQ(c.Call({"GET", "k"}), Bulk("new"));
}

// Removals after a read while another client still reads the value past the wait: GETDEL and
// GETEX with a time past answer the value, as Redis does, and the key is gone for every reader
// from then on, as EXPIREAT leaves it; its room comes back once the reader is done.
TEST_F(LeasedReplyWaitTest, RemovalsAfterAReadOfAValueStillReadElsewhere) {
  EXPECT_EQ(c.Call({"GETDEL", "k"}), Bulk("old"));
  EXPECT_EQ(c.Call({"GET", "k"}), "$-1\r\n");
  EXPECT_EQ(c.Call({"EXISTS", "k"}), ":0\r\n");
  EXPECT_EQ(c.Call({"GETDEL", "k"}), "$-1\r\n");
  EXPECT_EQ(ts.store().Stats().blocks_present, 1u);  // the reader's bytes stay until it is done
  ASSERT_TRUE(ts.store().Release(lease->id).ok());
  EXPECT_EQ(c.Call({"SET", "k", "new"}), "+OK\r\n");
  lease = ts.store().Acquire(ns, GenericKey(ns, "k"));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(c.Call({"GETEX", "k", "PXAT", "1"}), Bulk("new"));
  EXPECT_EQ(c.Call({"GET", "k"}), "$-1\r\n");
  ASSERT_TRUE(ts.store().Release(lease->id).ok());
  EXPECT_EQ(c.Call({"SET", "k", "newer"}), "+OK\r\n");
  EXPECT_EQ(c.Call({"GETEX", "k", "PXAT", "1"}), Bulk("newer"));
  EXPECT_EQ(c.Call({"DBSIZE"}), ":0\r\n");
  EXPECT_EQ(ts.store().Stats().blocks_present, 0u);
}

// A command that waits a long time for a reader tries again less and less often: a GETDEL, which
// copies the value at each attempt, makes about 60 attempts over a 1 s wait, not a thousand
// (pauses of 1 ms at first, then an eighth of the time waited, at most 32 ms; a timer never ends
// early, so this count is a bound, whatever the machine's speed).
TEST_F(LeasedReplyRetryTest, AWaitForAReaderBacksOff) {
  const auto gets = [&] {
    for (const store::NamespaceStats& n : ts.store().Stats().namespaces) {
      if (n.id == ns) return n.gets;
    }
    return uint64_t{0};
  };
  const uint64_t before = gets();
  EXPECT_EQ(c.Call({"GETDEL", "k"}), Bulk("old"));
  const uint64_t attempts = gets() - before;
  EXPECT_GE(attempts, 2u);
  EXPECT_LE(attempts, 100u);
  ASSERT_TRUE(ts.store().Release(lease->id).ok());
}

}  // namespace
}  // namespace kvtier::server
