// Untrusted bytes: every malformed input gets its documented reply (or a silent close), and the
// server goes on serving everybody else. Slow and greedy clients only ever slow themselves down.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <thread>

#include "daemon/server/test_client.h"

namespace kvtier::server {
namespace {

using testing::Resp;
using testing::TestClient;
using testing::TestServer;

struct Case {
  const char* name;
  std::string input;
  std::string reply;        // everything the server sends back
  bool closes = true;       // the server closes the connection after the reply
  bool half_close = false;  // the client ends its side after sending (a truncated frame)
};

const std::string kInvalidBulk = "-ERR Protocol error: invalid bulk length\r\n";
const std::string kInvalidMultibulk = "-ERR Protocol error: invalid multibulk length\r\n";

std::string TlsClientHello() {
  // A TLS 1.2 record header and the start of a ClientHello, as a browser sends to https://.
  std::string hello("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 11);
  hello += std::string(32, '\x5a');  // client random
  hello += std::string("\x00\x00\x20\xc0\x2b\xc0\x2f\x00\x9c\x00\x9d", 11);
  return hello;
}

std::vector<Case> Cases() {
  return {
      {"negative bulk length", "*1\r\n$-5\r\n", kInvalidBulk},
      {"bulk length beyond int64", "*1\r\n$99999999999999999999\r\n", kInvalidBulk},
      {"bulk length over the limit", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048577\r\n", kInvalidBulk},
      {"bulk length not a number", "*1\r\n$abc\r\n", kInvalidBulk},
      {"bulk length with a leading zero", "*1\r\n$04\r\nPING\r\n", kInvalidBulk},
      {"huge array count", "*99999999\r\n", kInvalidMultibulk},
      {"negative array count", "*-7\r\n", kInvalidMultibulk},
      {"array count not a number", "*x\r\n", kInvalidMultibulk},
      {"payload longer than declared", "*2\r\n$3\r\nGET\r\n$1\r\nkey\r\n",
       "-ERR Protocol error: bulk payload not followed by CRLF\r\n"},
      {"element without '$'", "*1\r\n:4\r\n", "-ERR Protocol error: expected '$', got ':'\r\n"},
      {"truncated frame", "*2\r\n$3\r\nGET\r\n$5\r\nab", "", true, true},
      {"huge declared command, then nothing", "*1000000\r\n$7\r\nKVT.PUT\r\n", "", true, true},
      {"unknown command", Resp({"NOSUCHCMD", "x"}),
       "-ERR unknown command 'NOSUCHCMD', with args beginning with: 'x' \r\n", false},
      {"wrong arity", Resp({"GET", "a", "b"}),
       "-ERR wrong number of arguments for 'get' command\r\n", false},
      {"oversize key", Resp({"SET", std::string(65, 'k'), "v"}), "-ERR key too long\r\n", false},
      {"more elements than declared", Resp({"PING"}) + "$4\r\nPING\r\n",
       "+PONG\r\n-ERR unknown command '$4', with args beginning with: \r\n+PONG\r\n", false},
      {"empty command name", "*1\r\n$0\r\n\r\n",
       "-ERR unknown command '', with args beginning with: \r\n", false},
      {"empty lines and empty arrays", "\r\n\n*0\r\n", "", false},
      {"garbage after a valid frame", Resp({"PING"}) + std::string("\x00\x01\x02", 3),
       "+PONG\r\n-ERR Protocol error: invalid byte '\\x00' in inline request\r\n"},
      {"HTTP GET", "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
       "-ERR wrong number of arguments for 'get' command\r\n"},
      {"HTTP POST", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", ""},
      {"TLS ClientHello", TlsClientHello(),
       "-ERR Protocol error: invalid byte '\\x16' in inline request\r\n"},
      {"inline command too long", std::string(70000, 'A'),
       "-ERR Protocol error: too big inline request\r\n"},
      {"CR without LF in an inline command", "PI\rNG\r\n",
       "-ERR Protocol error: CR not followed by LF in inline request\r\n"},
  };
}

class MalformedInputTest : public ::testing::TestWithParam<bool> {
 protected:
  static ServerOptions Options() {
    ServerOptions o;
    o.max_bulk_bytes = 1 << 20;
    o.max_key_bytes = 64;
    return o;
  }
  TestClient Connect() { return GetParam() ? ts_.ConnectTcp() : ts_.ConnectUnix(); }
  TestServer ts_{Options()};
};

TEST_P(MalformedInputTest, EachInputGetsItsReplyAndOthersAreServed) {
  ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString();
  TestClient bystander = Connect();
  uint64_t expected_errors = 0;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    TestClient client = Connect();
    ASSERT_TRUE(client.Send(c.input));
    if (c.half_close) client.ShutdownWrite();
    if (c.closes) {
      bool closed = false;
      EXPECT_EQ(client.ReadUntilClosed(&closed), c.reply);
      EXPECT_TRUE(closed);
      if (c.reply.find("Protocol error") != std::string::npos) ++expected_errors;
    } else {
      std::string got;
      while (got.size() < c.reply.size()) {
        const std::string reply = client.ReadReply();
        if (reply.empty()) break;
        got += reply;
      }
      EXPECT_EQ(got, c.reply);
      EXPECT_EQ(client.Call({"PING"}), "+PONG\r\n");  // still served
    }
    EXPECT_EQ(bystander.Call({"PING"}), "+PONG\r\n");
    EXPECT_EQ(ts_.ConnectUnix().Call({"PING"}), "+PONG\r\n");
  }
  EXPECT_EQ(ts_.server().Stats().protocol_errors, expected_errors);
}

INSTANTIATE_TEST_SUITE_P(UnixAndTcp, MalformedInputTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Tcp" : "Unix"; });

// One I/O thread, and a client that stops half-way through a frame: everybody else is served.
TEST(SlowClientTest, AStalledFrameBlocksNobody) {
  ServerOptions o;
  o.io_threads = 1;
  TestServer ts(o);
  ASSERT_TRUE(ts.status().ok());
  TestClient slow = ts.ConnectTcp();
  ASSERT_TRUE(slow.Send("*2\r\n$3\r\nGET\r\n$3\r\nk"));
  for (int i = 0; i < 20; ++i) {
    TestClient other = i % 2 == 0 ? ts.ConnectTcp() : ts.ConnectUnix();
    EXPECT_EQ(other.Call({"PING"}), "+PONG\r\n");
  }
  ASSERT_TRUE(slow.Send("ey\r\n"));
  EXPECT_EQ(slow.ReadReply(), "$-1\r\n");
}

// With an idle timeout, a client trickling a frame in is closed (partial frames are not activity),
// while a client that completes commands stays.
TEST(SlowClientTest, TheIdleTimeoutClosesATricklingClient) {
  ServerOptions o;
  o.idle_timeout_ms = 200;
  TestServer ts(o);
  ASSERT_TRUE(ts.status().ok());
  TestClient slow = ts.ConnectUnix();
  TestClient active = ts.ConnectUnix();
  const std::string frame = Resp({"PING"});
  bool closed = false;
  // One byte every 50 ms: the 14-byte frame would take 700 ms to arrive.
  for (size_t i = 0; i < frame.size() && !closed; ++i) {
    slow.Send(frame.substr(i, 1));
    EXPECT_EQ(active.Call({"PING"}), "+PONG\r\n");
    EXPECT_EQ(slow.ReadUntilClosed(&closed, std::chrono::milliseconds(50)), "");
  }
  EXPECT_TRUE(closed);
  EXPECT_EQ(active.Call({"PING"}), "+PONG\r\n");
  EXPECT_TRUE(ts.WaitForClients(1));  // the closed one ends its session after the close
}

// A client that pipelines big GETs and reads nothing: the server stops reading from it once its
// replies are pending, serves the others meanwhile, and delivers every reply once it reads.
TEST(GreedyClientTest, BackPressureLosesNothing) {
  ServerOptions o;
  o.max_inflight_bytes_per_client = 64 << 10;
  TestServer ts(o);
  ASSERT_TRUE(ts.status().ok());
  TestClient setup = ts.ConnectUnix();
  const std::string value(100 << 10, 'v');
  ASSERT_EQ(setup.Call({"SET", "big", value}), "+OK\r\n");

  TestClient greedy = ts.ConnectTcp();
  constexpr int kGets = 300;  // about 30 MiB of replies
  std::string batch;
  for (int i = 0; i < kGets; ++i) batch += Resp({"GET", "big"});
  std::thread sender([&] { greedy.Send(batch); });  // blocks until the server reads it all
  for (int i = 0; i < 20; ++i) EXPECT_EQ(setup.Call({"PING"}), "+PONG\r\n");
  const std::string expected = "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n";
  int good = 0;
  for (int i = 0; i < kGets; ++i) good += greedy.ReadReply() == expected;
  sender.join();
  EXPECT_EQ(good, kGets);
  EXPECT_TRUE(ts.WaitForLeases(0));
}

}  // namespace
}  // namespace kvtier::server
