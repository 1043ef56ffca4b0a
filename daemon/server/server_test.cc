#include "daemon/server/server.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "daemon/server/test_client.h"

namespace kvtier::server {
namespace {

using testing::Resp;
using testing::TestClient;
using testing::TestServer;

// A store to create servers against, for the option checks that never start one.
class ServerCreateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tier = tiers::HostTier::Create(
        {.capacity_bytes = 4 << 20, .try_huge_pages = false, .try_mlock = false, .name = ""});
    ASSERT_TRUE(tier.ok());
    tier_ = std::move(tier).value();
    auto store = store::Store::Create({}, {tier_.get()}, clock_);
    ASSERT_TRUE(store.ok());
    store_ = std::move(store).value();
  }

  Status CreateStatus(const ServerOptions& options) {
    return Server::Create(options, *store_).status();
  }

  FakeClock clock_;
  std::unique_ptr<tiers::HostTier> tier_;
  std::unique_ptr<store::Store> store_;
};

TEST_F(ServerCreateTest, RefusesAServerWithoutListeners) {
  Status st = CreateStatus({});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "listen: neither unix_path nor tcp_port is set");
}

TEST_F(ServerCreateTest, RefusesANonLoopbackAddressWithoutPassword) {
  ServerOptions o;
  o.tcp_host = "0.0.0.0";
  o.tcp_port = 6399;
  Status st = CreateStatus(o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "password: required when tcp_host (0.0.0.0) is not a loopback address; set a password "
            "or listen on 127.0.0.1");
  o.password = "s3cret";
  EXPECT_TRUE(CreateStatus(o).ok());
}

TEST_F(ServerCreateTest, AcceptsLoopbackAddressesWithoutPassword) {
  for (const char* host : {"127.0.0.1", "::1", "localhost", "127.0.0.2"}) {
    ServerOptions o;
    o.tcp_host = host;
    o.tcp_port = 6399;
    EXPECT_TRUE(CreateStatus(o).ok()) << host;
  }
}

TEST_F(ServerCreateTest, NamesTheBadOption) {
  ServerOptions o;
  o.unix_path = "/tmp/x.sock";
  o.io_threads = 0;
  EXPECT_EQ(CreateStatus(o).message(), "io_threads: must be in [1, 256]");
  o.io_threads = 1;
  o.max_clients = 0;
  EXPECT_EQ(CreateStatus(o).message(), "max_clients: must be positive");
  o.max_clients = 1;
  o.password = std::string(4097, 'p');
  EXPECT_EQ(CreateStatus(o).message(),
            "password: longer than 4096 bytes, the largest argument a client may send before AUTH");
  o.password.clear();
  o.tcp_host = "kvtier.example.com";
  o.tcp_port = 1;
  EXPECT_EQ(CreateStatus(o).message(),
            "tcp_host: 'kvtier.example.com' is not an IP address or 'localhost'");
}

TEST(ServerTest, AnswersPingOnBothListeners) {
  TestServer ts;
  ASSERT_TRUE(ts.status().ok()) << ts.status().ToString();
  EXPECT_NE(ts.tcp_port(), 0);
  TestClient unix_client = ts.ConnectUnix();
  TestClient tcp_client = ts.ConnectTcp();
  ASSERT_TRUE(unix_client.connected());
  ASSERT_TRUE(tcp_client.connected());
  EXPECT_EQ(unix_client.Call({"PING"}), "+PONG\r\n");
  EXPECT_EQ(tcp_client.Call({"PING"}), "+PONG\r\n");
}

TEST(ServerTest, SetsTheSocketModeAndRemovesTheFileOnStop) {
  ServerOptions o;
  o.unix_mode = 0600;
  TestServer ts(o);
  ASSERT_TRUE(ts.status().ok()) << ts.status().ToString();
  struct stat st {};
  ASSERT_EQ(stat(ts.unix_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ts.server().Stop();
  EXPECT_NE(stat(ts.unix_path().c_str(), &st), 0);
}

TEST(ServerTest, ReplacesAStaleSocketFile) {
  TestServer first;
  ASSERT_TRUE(first.status().ok());
  const std::string path = first.unix_path() + ".stale";
  // A socket file nobody listens on, as a crashed daemon leaves behind.
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);

  ServerOptions o;
  o.unix_path = path;
  auto server = Server::Create(o, first.store());
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE((*server)->Start().ok());
  TestClient c = TestClient::ConnectUnix(path);
  EXPECT_EQ(c.Call({"PING"}), "+PONG\r\n");
}

TEST(ServerTest, RefusesAPathInUseOrNotASocket) {
  TestServer first;
  ASSERT_TRUE(first.status().ok());
  ServerOptions o;
  o.unix_path = first.unix_path();
  auto second = Server::Create(o, first.store());
  ASSERT_TRUE(second.ok());
  Status st = (*second)->Start();
  EXPECT_EQ(st.code(), StatusCode::kBusy);
  EXPECT_EQ(st.message(), "unix socket " + o.unix_path + ": another server is listening there");

  o.unix_path = first.unix_path() + ".txt";
  std::ofstream(o.unix_path) << "not a socket";
  auto third = Server::Create(o, first.store());
  ASSERT_TRUE(third.ok());
  st = (*third)->Start();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "unix socket " + o.unix_path + ": the path exists and is not a socket");
}

TEST(ServerTest, BindErrorsNameTheAddress) {
  TestServer first;
  ASSERT_TRUE(first.status().ok());
  ServerOptions o;
  o.unix_path = "/nonexistent-kvtier-dir/kvtierd.sock";
  auto server = Server::Create(o, first.store());
  ASSERT_TRUE(server.ok());
  Status st = (*server)->Start();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("unix socket /nonexistent-kvtier-dir/kvtierd.sock: bind"),
            std::string::npos)
      << st.ToString();

  ServerOptions tcp;
  tcp.tcp_port = first.tcp_port();  // taken by the first server
  auto clash = Server::Create(tcp, first.store());
  ASSERT_TRUE(clash.ok());
  st = (*clash)->Start();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tcp 127.0.0.1:" + std::to_string(first.tcp_port()) + ": bind"),
            std::string::npos)
      << st.ToString();
}

TEST(ServerTest, RefusesUidsNotAllowed) {
  ServerOptions o;
  o.allowed_uids = {getuid() + 1};
  TestServer ts(o);
  ASSERT_TRUE(ts.status().ok());
  TestClient c = ts.ConnectUnix();
  bool closed = false;
  EXPECT_EQ(c.ReadUntilClosed(&closed), "-NOPERM this user may not connect\r\n");
  EXPECT_TRUE(closed);
  EXPECT_EQ(ts.server().Stats().rejected_connections, 1u);
  // The uid check is for the Unix socket; TCP clients authenticate with a password instead.
  TestClient tcp = ts.ConnectTcp();
  EXPECT_EQ(tcp.Call({"PING"}), "+PONG\r\n");
}

TEST(ServerTest, AdmitsAllowedUids) {
  ServerOptions o;
  o.allowed_uids = {getuid()};
  TestServer ts(o);
  ASSERT_TRUE(ts.status().ok());
  TestClient c = ts.ConnectUnix();
  EXPECT_EQ(c.Call({"PING"}), "+PONG\r\n");
}

TEST(ServerTest, ClosesClientsBeyondMaxClients) {
  ServerOptions o;
  o.max_clients = 1;
  TestServer ts(o);
  ASSERT_TRUE(ts.status().ok());
  TestClient first = ts.ConnectUnix();
  EXPECT_EQ(first.Call({"PING"}), "+PONG\r\n");
  TestClient second = ts.ConnectTcp();
  bool closed = false;
  EXPECT_EQ(second.ReadUntilClosed(&closed), "-BUSY max number of clients reached\r\n");
  EXPECT_TRUE(closed);
  first.Close();
  ASSERT_TRUE(ts.WaitForClients(0));
  TestClient third = ts.ConnectTcp();
  EXPECT_EQ(third.Call({"PING"}), "+PONG\r\n");
  const ServerStats stats = ts.server().Stats();
  EXPECT_EQ(stats.total_connections, 3u);
  EXPECT_EQ(stats.rejected_connections, 1u);
  EXPECT_EQ(stats.connected_clients, 1u);
}

TEST(ServerTest, StopClosesEveryConnection) {
  TestServer ts;
  ASSERT_TRUE(ts.status().ok());
  TestClient a = ts.ConnectUnix();
  TestClient b = ts.ConnectTcp();
  EXPECT_EQ(a.Call({"PING"}), "+PONG\r\n");
  EXPECT_EQ(b.Call({"PING"}), "+PONG\r\n");
  ts.server().Stop();
  bool closed = false;
  a.ReadUntilClosed(&closed);
  EXPECT_TRUE(closed);
  b.ReadUntilClosed(&closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(ts.server().Stats().connected_clients, 0u);
  ts.server().Stop();  // idempotent
}

TEST(ServerTest, CountsCommands) {
  TestServer ts;
  ASSERT_TRUE(ts.status().ok());
  TestClient c = ts.ConnectUnix();
  ASSERT_TRUE(c.Send(Resp({"PING"}) + Resp({"PING"}) + "PING\r\n"));
  EXPECT_EQ(c.ReadReply(), "+PONG\r\n");
  EXPECT_EQ(c.ReadReply(), "+PONG\r\n");
  EXPECT_EQ(c.ReadReply(), "+PONG\r\n");
  EXPECT_EQ(ts.server().Stats().commands_processed, 3u);
}

// Idle connections give back what their last command needed: after a 256 KiB SET and a 256 KiB
// GET each, a hundred idle connections cost well under 64 KiB apiece. Measured with glibc's heap
// statistics; under a sanitizer, whose allocator glibc does not see, there is nothing to measure.
TEST(ServerMemoryTest, IdleConnectionsStaySmall) {
  TestServer ts;
  ASSERT_TRUE(ts.status().ok());
  constexpr int kClients = 100;
  const std::string value(256 << 10, 'v');  // 100 of them fit in the 64 MiB tier
  {
    TestClient setup = ts.ConnectUnix();
    ASSERT_EQ(setup.Call({"SET", "big", value}), "+OK\r\n");
  }
  ASSERT_TRUE(ts.WaitForClients(0));
  const size_t before = mallinfo2().uordblks;
  if (before == 0) GTEST_SKIP() << "heap statistics unavailable (sanitizer allocator)";
  std::vector<TestClient> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(i % 2 == 0 ? ts.ConnectUnix() : ts.ConnectTcp());
    ASSERT_EQ(clients.back().Call({"SET", "k" + std::to_string(i), value}), "+OK\r\n");
    ASSERT_EQ(clients.back().Call({"GET", "big"}).size(), value.size() + 11);
  }
  const size_t after = mallinfo2().uordblks;
  const size_t per_client = after > before ? (after - before) / kClients : 0;
  EXPECT_LT(per_client, size_t{64} << 10) << per_client << " bytes per idle connection";
  RecordProperty("bytes_per_idle_connection", static_cast<int>(per_client));
}

// Many clients on both listeners, each writing and reading back its own keys while the others do
// the same: no reply crosses connections, and every value comes back intact.
TEST(ServerConcurrencyTest, ClientsOnManyThreadsSeeOnlyTheirOwnReplies) {
  ServerOptions o;
  o.io_threads = 4;
  TestServer ts(o);
  ASSERT_TRUE(ts.status().ok());
  constexpr int kClients = 8;
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      TestClient c = t % 2 == 0 ? ts.ConnectUnix() : ts.ConnectTcp();
      for (int i = 0; i < kRounds; ++i) {
        const std::string key = "k" + std::to_string(t) + "-" + std::to_string(i % 10);
        const std::string value = std::string(100 + i, static_cast<char>('a' + t));
        // Pipelined: both commands in one write, both replies in order.
        c.Send(Resp({"SET", key, value}) + Resp({"GET", key}));
        if (c.ReadReply() != "+OK\r\n") ++failures;
        if (c.ReadReply() != "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n") {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ts.server().Stats().commands_processed, 2u * kClients * kRounds);
}

// Concurrent SETs of one hot key, with GETs reading it all the while: every SET succeeds (the last
// one wins) and every GET sees one whole value, or a miss while a SET is between removing the old
// value and committing the new one (the store has no atomic replace; a cache may miss).
TEST(ServerConcurrencyTest, ConcurrentSetsOfOneKeyAllSucceed) {
  ServerOptions o;
  o.io_threads = 4;
  TestServer ts(o);
  ASSERT_TRUE(ts.status().ok());
  constexpr int kClients = 6;
  constexpr int kRounds = 300;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      TestClient c = t % 2 == 0 ? ts.ConnectUnix() : ts.ConnectTcp();
      const std::string value(1000, static_cast<char>('a' + t));
      for (int i = 0; i < kRounds; ++i) {
        c.Send(Resp({"SET", "hot", value}) + Resp({"GET", "hot"}));
        const std::string set = c.ReadReply();
        const std::string get = c.ReadReply();
        EXPECT_EQ(set, "+OK\r\n");
        failures += set != "+OK\r\n";
        const bool whole = get.size() == 1009 && get.substr(0, 7) == "$1000\r\n" &&
                           get.find_first_not_of(get[7], 7) == 1007;
        const bool miss = get == "$-1\r\n";
        EXPECT_TRUE(whole || miss) << get.substr(0, 16);
        failures += !(whole || miss);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(ts.WaitForLeases(0));
}

}  // namespace
}  // namespace kvtier::server
