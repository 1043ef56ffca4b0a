// Connection commands (PING, HELLO, AUTH, CLIENT, QUIT, COMMAND, CONFIG, SELECT), the AUTH gate,
// and the connection loop's framing (pipelining, inline commands, byte-at-a-time input).
#include <gtest/gtest.h>

#include "common/version.h"
#include "daemon/server/test_client.h"

namespace kvtier::server {
namespace {

using testing::Bulk;
using testing::Resp;
using testing::TestClient;
using testing::TestServer;

// HELLO's fields after the header, for a client with `id` speaking `proto`.
std::string HelloFields(int proto, const std::string& id) {
  return Bulk("server") + Bulk("kvtier") + Bulk("version") + Bulk(std::string(kVersion)) +
         Bulk("proto") + ":" + std::to_string(proto) + "\r\n" + Bulk("id") + ":" + id + "\r\n" +
         Bulk("mode") + Bulk("standalone") + Bulk("role") + Bulk("master") + Bulk("modules") +
         "*0\r\n";
}

// ":<id>\r\n" -> "<id>".
std::string IdOf(const std::string& integer_reply) {
  return integer_reply.substr(1, integer_reply.size() - 3);
}

class ConnectionCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString(); }
  TestServer ts_;
};

TEST_F(ConnectionCommandsTest, Ping) {
  TestClient c = ts_.ConnectUnix();
  EXPECT_EQ(c.Call({"PING"}), "+PONG\r\n");
  EXPECT_EQ(c.Call({"ping", "hello"}), "$5\r\nhello\r\n");
  EXPECT_EQ(c.Call({"PING", "a", "b"}), "-ERR wrong number of arguments for 'ping' command\r\n");
  ASSERT_TRUE(c.Send("PING\r\n"));  // inline, as telnet sends it
  EXPECT_EQ(c.ReadReply(), "+PONG\r\n");
}

// redis-cli --pipe sends ECHO with 20 random bytes last and reads until their echo comes back.
TEST_F(ConnectionCommandsTest, Echo) {
  TestClient c = ts_.ConnectUnix();
  EXPECT_EQ(c.Call({"ECHO", "hello"}), "$5\r\nhello\r\n");
  EXPECT_EQ(c.Call({"echo", std::string("\0\r\n", 3)}), std::string("$3\r\n\0\r\n\r\n", 9));
  EXPECT_EQ(c.Call({"ECHO"}), "-ERR wrong number of arguments for 'echo' command\r\n");
  EXPECT_EQ(c.Call({"ECHO", "a", "b"}), "-ERR wrong number of arguments for 'echo' command\r\n");
}

TEST_F(ConnectionCommandsTest, HelloSwitchesTheProtocol) {
  TestClient c = ts_.ConnectTcp();
  const std::string id = IdOf(c.Call({"CLIENT", "ID"}));
  EXPECT_EQ(c.Call({"HELLO"}), "*14\r\n" + HelloFields(2, id));
  EXPECT_EQ(c.Call({"GET", "missing"}), "$-1\r\n");
  EXPECT_EQ(c.Call({"HELLO", "3"}), "%7\r\n" + HelloFields(3, id));
  EXPECT_EQ(c.Call({"GET", "missing"}), "_\r\n");
  EXPECT_EQ(c.Call({"HELLO", "2"}), "*14\r\n" + HelloFields(2, id));
  EXPECT_EQ(c.Call({"GET", "missing"}), "$-1\r\n");
}

TEST_F(ConnectionCommandsTest, HelloRefusesOtherVersionsAndOptions) {
  TestClient c = ts_.ConnectUnix();
  EXPECT_EQ(c.Call({"HELLO", "4"}), "-NOPROTO unsupported protocol version\r\n");
  EXPECT_EQ(c.Call({"HELLO", "three"}),
            "-ERR Protocol version is not an integer or out of range\r\n");
  EXPECT_EQ(c.Call({"HELLO", "3", "FOO"}), "-ERR Syntax error in HELLO option 'FOO'\r\n");
  // A failed HELLO leaves the protocol alone.
  EXPECT_EQ(c.Call({"GET", "missing"}), "$-1\r\n");
}

TEST_F(ConnectionCommandsTest, HelloSetsTheName) {
  TestClient c = ts_.ConnectUnix();
  const std::string id = IdOf(c.Call({"CLIENT", "ID"}));
  EXPECT_EQ(c.Call({"HELLO", "2", "SETNAME", "engine-7"}), "*14\r\n" + HelloFields(2, id));
  EXPECT_EQ(c.Call({"CLIENT", "GETNAME"}), "$8\r\nengine-7\r\n");
}

TEST_F(ConnectionCommandsTest, AuthWithoutPasswordConfigured) {
  TestClient c = ts_.ConnectUnix();
  EXPECT_EQ(c.Call({"AUTH", "x"}),
            "-ERR AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?\r\n");
  // The default user has no password then, and takes any (Redis 7 does the same): a client
  // configured with a username and password still connects. No other user exists.
  EXPECT_EQ(c.Call({"AUTH", "default", "x"}), "+OK\r\n");
  EXPECT_EQ(c.Call({"AUTH", "someone", "x"}), "-WRONGPASS invalid username-password pair\r\n");
  const std::string id = IdOf(c.Call({"CLIENT", "ID"}));
  EXPECT_EQ(c.Call({"HELLO", "2", "AUTH", "default", "x"}), "*14\r\n" + HelloFields(2, id));
  EXPECT_EQ(c.Call({"HELLO", "2", "AUTH", "someone", "x"}),
            "-WRONGPASS invalid username-password pair\r\n");
}

TEST_F(ConnectionCommandsTest, ClientNameAndId) {
  TestClient a = ts_.ConnectUnix();
  TestClient b = ts_.ConnectUnix();
  EXPECT_EQ(a.Call({"CLIENT", "GETNAME"}), "$-1\r\n");
  EXPECT_EQ(a.Call({"CLIENT", "SETNAME", "worker-1"}), "+OK\r\n");
  EXPECT_EQ(a.Call({"client", "getname"}), "$8\r\nworker-1\r\n");
  EXPECT_EQ(a.Call({"CLIENT", "SETNAME", "two words"}),
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n");
  EXPECT_EQ(a.Call({"CLIENT", "SETINFO", "LIB-NAME", "redis-py"}), "+OK\r\n");
  EXPECT_NE(a.Call({"CLIENT", "ID"}), b.Call({"CLIENT", "ID"}));
  EXPECT_EQ(a.Call({"CLIENT", "KILL"}),
            "-ERR unknown subcommand or wrong number of arguments for 'client|KILL'\r\n");
}

TEST_F(ConnectionCommandsTest, StubsForRedisTools) {
  TestClient c = ts_.ConnectUnix();
  EXPECT_EQ(c.Call({"COMMAND"}), "*0\r\n");
  EXPECT_EQ(c.Call({"COMMAND", "DOCS"}), "*0\r\n");
  EXPECT_EQ(c.Call({"COMMAND", "COUNT"}), ":0\r\n");
  EXPECT_EQ(c.Call({"CONFIG", "GET", "save"}), "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
  EXPECT_EQ(c.Call({"CONFIG", "GET", "appendonly"}), "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
  EXPECT_EQ(c.Call({"CONFIG", "GET", "maxmemory"}), "*0\r\n");
  EXPECT_EQ(c.Call({"CONFIG", "GET", "*"}).substr(0, 4), "*4\r\n");
  EXPECT_EQ(c.Call({"CONFIG", "SET", "save", ""}), "-ERR CONFIG SET is not supported\r\n");
  EXPECT_EQ(c.Call({"SELECT", "0"}), "+OK\r\n");
  EXPECT_EQ(c.Call({"SELECT", "1"}), "-ERR DB index is out of range\r\n");
  EXPECT_EQ(c.Call({"SELECT", "x"}), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(c.Call({"HELLO", "3"}).substr(0, 4), "%7\r\n");
  EXPECT_EQ(c.Call({"CONFIG", "GET", "appendonly"}), "%1\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
}

TEST_F(ConnectionCommandsTest, UnknownCommandsAndArity) {
  TestClient c = ts_.ConnectUnix();
  EXPECT_EQ(c.Call({"FOO", "a", "b"}),
            "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n");
  EXPECT_EQ(c.Call({"GET"}), "-ERR wrong number of arguments for 'get' command\r\n");
  EXPECT_EQ(c.Call({"KVT.LOOKUP", "x"}),
            "-ERR wrong number of arguments for 'kvt.lookup' command\r\n");
  // Errors are replies like any other: the connection carries on.
  EXPECT_EQ(c.Call({"PING"}), "+PONG\r\n");
}

TEST_F(ConnectionCommandsTest, QuitRepliesThenCloses) {
  TestClient c = ts_.ConnectUnix();
  ASSERT_TRUE(c.Send(Resp({"QUIT"}) + Resp({"PING"})));
  bool closed = false;
  EXPECT_EQ(c.ReadUntilClosed(&closed), "+OK\r\n");
  EXPECT_TRUE(closed);
}

TEST_F(ConnectionCommandsTest, PipelinedRepliesComeInOrder) {
  TestClient c = ts_.ConnectTcp();
  std::string batch;
  std::string expected;
  for (int i = 0; i < 500; ++i) {
    batch += Resp({"PING", std::to_string(i)});
    expected += Bulk(std::to_string(i));
  }
  ASSERT_TRUE(c.Send(batch));
  std::string got;
  while (got.size() < expected.size()) {
    std::string reply = c.ReadReply();
    if (reply.empty()) break;
    got += reply;
  }
  EXPECT_EQ(got, expected);
}

TEST_F(ConnectionCommandsTest, AFrameArrivingOneByteAtATime) {
  TestClient c = ts_.ConnectUnix();
  const std::string frame = Resp({"SET", "slow", "value"}) + Resp({"GET", "slow"});
  for (char byte : frame) ASSERT_TRUE(c.Send(std::string_view(&byte, 1)));
  EXPECT_EQ(c.ReadReply(), "+OK\r\n");
  EXPECT_EQ(c.ReadReply(), "$5\r\nvalue\r\n");
}

class AuthTest : public ::testing::Test {
 protected:
  static ServerOptions WithPassword() {
    ServerOptions o;
    o.password = "s3cret";
    return o;
  }
  void SetUp() override { ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString(); }
  TestServer ts_{WithPassword()};
};

TEST_F(AuthTest, OnlyGreetingsBeforeAuth) {
  TestClient c = ts_.ConnectTcp();
  EXPECT_EQ(c.Call({"PING"}), "+PONG\r\n");
  EXPECT_EQ(c.Call({"GET", "k"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(c.Call({"KVT.STATS"}), "-NOAUTH Authentication required.\r\n");
  // Unknown commands too: a stranger learns nothing about the command set.
  EXPECT_EQ(c.Call({"NOSUCH"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(c.Call({"HELLO", "3"}),
            "-NOAUTH HELLO must be called with the client already authenticated, otherwise the "
            "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
            "select the RESP protocol version at the same time\r\n");
  EXPECT_EQ(c.Call({"AUTH", "wrong"}), "-WRONGPASS invalid username-password pair\r\n");
  EXPECT_EQ(c.Call({"AUTH", "admin", "s3cret"}), "-WRONGPASS invalid username-password pair\r\n");
  EXPECT_EQ(c.Call({"GET", "k"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(c.Call({"AUTH", "s3cret"}), "+OK\r\n");
  EXPECT_EQ(c.Call({"GET", "k"}), "$-1\r\n");
}

TEST_F(AuthTest, AuthWithTheDefaultUser) {
  TestClient c = ts_.ConnectUnix();
  EXPECT_EQ(c.Call({"AUTH", "default", "s3cret"}), "+OK\r\n");
  EXPECT_EQ(c.Call({"SET", "k", "v"}), "+OK\r\n");
}

TEST_F(AuthTest, HelloWithAuth) {
  TestClient c = ts_.ConnectUnix();
  EXPECT_EQ(c.Call({"HELLO", "3", "AUTH", "default", "nope"}),
            "-WRONGPASS invalid username-password pair\r\n");
  const std::string hello = c.Call({"HELLO", "3", "AUTH", "default", "s3cret"});
  EXPECT_EQ(hello.substr(0, 4), "%7\r\n");
  EXPECT_EQ(c.Call({"GET", "k"}), "_\r\n");
}

TEST_F(AuthTest, SmallFramesBeforeAuth) {
  TestClient c = ts_.ConnectTcp();
  const std::string big(5000, 'x');
  ASSERT_TRUE(c.Send(Resp({"PING", big})));
  bool closed = false;
  EXPECT_EQ(c.ReadUntilClosed(&closed), "-ERR Protocol error: invalid bulk length\r\n");
  EXPECT_TRUE(closed);

  TestClient d = ts_.ConnectTcp();
  ASSERT_TRUE(d.Send("*17\r\n"));
  EXPECT_EQ(d.ReadUntilClosed(&closed), "-ERR Protocol error: invalid multibulk length\r\n");
  EXPECT_TRUE(closed);

  // After AUTH the configured limits apply, in the same pipeline.
  TestClient e = ts_.ConnectTcp();
  ASSERT_TRUE(e.Send(Resp({"AUTH", "s3cret"}) + Resp({"PING", big})));
  EXPECT_EQ(e.ReadReply(), "+OK\r\n");
  EXPECT_EQ(e.ReadReply(), Bulk(big));
}

}  // namespace
}  // namespace kvtier::server
