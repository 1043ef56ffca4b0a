// Large SET values are received straight into their arena slot (StagedValue): the value read back
// is the one sent, the old value stays visible until the new one is published, and a client that
// vanishes, breaks the frame or outlasts the reservation mid-value leaves nothing behind.
#include "daemon/server/staged_value.h"

#include <gtest/gtest.h>

#include <string>

#include "daemon/server/test_client.h"

namespace kvtier::server {
namespace {

using testing::Bulk;
using testing::Resp;
using testing::SameReply;
using testing::TestClient;
using testing::TestServer;
using testing::Value;

class StagedValueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString();
    c_ = ts_.ConnectUnix();
  }
  uint64_t Staged() { return ts_.server().Stats().staged_set_values; }
  store::StoreStats Store() { return ts_.store().Stats(); }

  TestServer ts_{ServerOptions{}, /*with_arena=*/true, /*capacity_bytes=*/uint64_t{256} << 20};
  TestClient c_;
};

TEST_F(StagedValueTest, ALargeValueSentAtOnceIsStagedAndReadsBackWhole) {
  const std::string big = Value(3 << 20, 'a');
  ASSERT_EQ(c_.Call({"SET", "big", big}), "+OK\r\n");
  EXPECT_EQ(Staged(), 1u);
  EXPECT_TRUE(SameReply(c_.Call({"GET", "big"}), Bulk(big)));
  // Replacing it with another staged value, and with a small one.
  const std::string other = Value((2 << 20) + 1, 'q');
  ASSERT_EQ(c_.Call({"SET", "big", other}), "+OK\r\n");
  EXPECT_EQ(Staged(), 2u);
  EXPECT_TRUE(SameReply(c_.Call({"GET", "big"}), Bulk(other)));
  ASSERT_EQ(c_.Call({"SET", "big", "tiny"}), "+OK\r\n");
  EXPECT_EQ(c_.Call({"GET", "big"}), Bulk("tiny"));
  EXPECT_EQ(c_.Call({"DBSIZE"}), ":1\r\n");
  EXPECT_EQ(Store().blocks_writing, 0u);
}

TEST_F(StagedValueTest, SmallValuesAndOtherCommandsAreNotStaged) {
  const std::string under = Value(kStagedValueMinBytes - 1, 'b');
  const std::string big = Value(1 << 20, 'c');
  ASSERT_EQ(c_.Call({"SET", "under", under}), "+OK\r\n");
  ASSERT_EQ(c_.Call({"MSET", "m1", big, "m2", big}), "+OK\r\n");
  // SET with options takes its value as an argument: only a plain SET's value is staged.
  EXPECT_EQ(c_.Call({"SET", "opt", big, "EX", "10"}), "+OK\r\n");
  EXPECT_EQ(Staged(), 0u);
  EXPECT_TRUE(SameReply(c_.Call({"GET", "m2"}), Bulk(big)));
  EXPECT_TRUE(SameReply(c_.Call({"GET", "opt"}), Bulk(big)));
}

TEST_F(StagedValueTest, AValueSentInPiecesIsStagedAndReadsBackWhole) {
  const std::string big = Value(1 << 20, 'd');
  const std::string frame = Resp({"SET", "slow", big});
  // The header and a sliver of the value first, then the rest in pieces: the server receives
  // the first part into the argument and the rest, once an eighth is in, into the slot.
  const size_t sliver = 20 << 10;
  size_t at = frame.size() - big.size() - 2 + sliver;
  ASSERT_TRUE(c_.Send(std::string_view(frame).substr(0, at)));
  while (at < frame.size()) {
    const size_t n = std::min<size_t>(64 << 10, frame.size() - at);
    ASSERT_TRUE(c_.Send(std::string_view(frame).substr(at, n)));
    at += n;
  }
  ASSERT_EQ(c_.ReadReply(), "+OK\r\n");
  EXPECT_EQ(Staged(), 1u);
  EXPECT_TRUE(SameReply(c_.Call({"GET", "slow"}), Bulk(big)));
}

TEST_F(StagedValueTest, CommandsPipelinedAfterLargeValuesAreAllAnswered) {
  // A value's last bytes, its CRLF and the commands after it arrive together and are taken in
  // one read: the payload into its slot, the rest into the read buffer.
  const std::string a = Value(1 << 20, 'e');
  const std::string b = Value((1 << 20) + 3, 'f');
  ASSERT_TRUE(c_.Send(Resp({"SET", "a", a}) + Resp({"SET", "b", b}) + Resp({"PING"}) +
                      Resp({"GET", "a"}) + Resp({"DBSIZE"})));
  EXPECT_EQ(c_.ReadReply(), "+OK\r\n");
  EXPECT_EQ(c_.ReadReply(), "+OK\r\n");
  EXPECT_EQ(c_.ReadReply(), "+PONG\r\n");
  EXPECT_TRUE(SameReply(c_.ReadReply(), Bulk(a)));
  EXPECT_EQ(c_.ReadReply(), ":2\r\n");
  EXPECT_EQ(Staged(), 2u);
  EXPECT_TRUE(SameReply(c_.Call({"GET", "b"}), Bulk(b)));
}

TEST_F(StagedValueTest, TheOldValueStaysVisibleUntilTheNewOneIsPublished) {
  const std::string old_value = Value(1 << 20, 'e');
  const std::string new_value = Value(1 << 20, 'f');
  ASSERT_EQ(c_.Call({"SET", "k", old_value}), "+OK\r\n");
  const std::string frame = Resp({"SET", "k", new_value});
  ASSERT_TRUE(c_.Send(std::string_view(frame).substr(0, frame.size() - 1000)));
  ASSERT_TRUE(testing::WaitFor([&] { return Store().blocks_writing == 1; }));
  TestClient reader = ts_.ConnectUnix();
  EXPECT_TRUE(SameReply(reader.Call({"GET", "k"}), Bulk(old_value)));
  ASSERT_TRUE(c_.Send(std::string_view(frame).substr(frame.size() - 1000)));
  ASSERT_EQ(c_.ReadReply(), "+OK\r\n");
  EXPECT_TRUE(SameReply(reader.Call({"GET", "k"}), Bulk(new_value)));
  EXPECT_EQ(Staged(), 2u);
}

TEST_F(StagedValueTest, AClientThatVanishesMidValueLeavesNothing) {
  ASSERT_EQ(c_.Call({"SET", "k", "old"}), "+OK\r\n");
  const std::string big = Value(2 << 20, 'g');
  const std::string frame = Resp({"SET", "k", big});
  ASSERT_TRUE(c_.Send(std::string_view(frame).substr(0, frame.size() / 2)));
  ASSERT_TRUE(testing::WaitFor([&] { return Store().blocks_writing == 1; }));
  const uint64_t aborted = Store().aborted_puts;
  c_.Close();
  ASSERT_TRUE(testing::WaitFor([&] { return Store().blocks_writing == 0; }));
  EXPECT_EQ(Store().aborted_puts, aborted + 1);
  TestClient other = ts_.ConnectUnix();
  EXPECT_EQ(other.Call({"GET", "k"}), Bulk("old"));
  EXPECT_EQ(other.Call({"DBSIZE"}), ":1\r\n");
}

TEST_F(StagedValueTest, AMalformedFrameAfterTheValueClosesAndLeavesNothing) {
  const std::string big = Value(1 << 20, 'h');
  std::string frame = Resp({"SET", "k", big});
  frame[frame.size() - 2] = 'X';  // no CRLF after the payload
  ASSERT_TRUE(c_.Send(frame));
  bool closed = false;
  const std::string reply = c_.ReadUntilClosed(&closed);
  EXPECT_TRUE(closed);
  EXPECT_NE(reply.find("-ERR Protocol error"), std::string::npos) << reply;
  ASSERT_TRUE(testing::WaitFor([&] { return Store().blocks_writing == 0; }));
  TestClient other = ts_.ConnectUnix();
  EXPECT_EQ(other.Call({"EXISTS", "k"}), ":0\r\n");
  EXPECT_EQ(other.Call({"DBSIZE"}), ":0\r\n");
}

TEST_F(StagedValueTest, AReservationThatTimesOutMidValueClosesTheConnection) {
  const std::string big = Value(2 << 20, 'i');
  const std::string frame = Resp({"SET", "k", big});
  ASSERT_TRUE(c_.Send(std::string_view(frame).substr(0, frame.size() / 2)));
  ASSERT_TRUE(testing::WaitFor([&] { return Store().blocks_writing == 1; }));
  ts_.clock().AdvanceMicros(store::StoreOptions{}.reservation_timeout_us + 1);
  EXPECT_EQ(ts_.store().ExpireDeadlines(), 1u);
  // The next bytes find the reservation gone: nothing more is written into its slot.
  (void)c_.Send(std::string_view(frame).substr(frame.size() / 2));
  bool closed = false;
  (void)c_.ReadUntilClosed(&closed);
  EXPECT_TRUE(closed);
  ASSERT_TRUE(ts_.WaitForClients(0));
  EXPECT_EQ(Store().blocks_quarantined, 0u);  // given back when the connection ended
  TestClient other = ts_.ConnectUnix();
  EXPECT_EQ(other.Call({"EXISTS", "k"}), ":0\r\n");
}

}  // namespace
}  // namespace kvtier::server
