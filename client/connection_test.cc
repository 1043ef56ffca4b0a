// The connection under the Client, through the Client: connecting (errors, timeouts, the /tmp
// fallback's check, authentication) and how a connection fails (a send the daemon cut short, an
// exception part way through a round trip).
#include "client/connection.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/testing/address_space_cap.h"
#include "client/testing/in_process_daemon.h"
#include "client/unique_fd.h"
#include "common/paths.h"

namespace kvtier::client {
namespace {

using testing::InProcessDaemon;

// std::bad_alloc in the middle of a round trip (here: while a 32 MiB reply is read, in a child
// process whose memory is capped) must give the connection up: the rest of the reply is still
// coming, and a later call would take it for its own. Which allocation fails first is up to the
// allocator: when it is one after the round trip (the value handed back), the connection is in
// step and may stay usable; then its next call must be answered as its own.
TEST(ClientOutOfMemoryTest, AnExceptionMidRoundTripGivesTheConnectionUp) {
  if (!testing::kAddressSpaceCapWorks) GTEST_SKIP() << "no address-space cap under sanitizers";
  ASSERT_TRUE(testing::MapLargeAllocationsAlone());
  InProcessDaemon server(InProcessDaemon::Options{.arena_bytes = uint64_t{64} << 20});
  Result<Client> client = Client::Connect(server.url());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE(client->Set("big", std::string(size_t{32} << 20, 'v')).ok());
  ASSERT_TRUE(client->Ping().ok());
  EXPECT_EXIT(
      {
        int outcome = 0;
        if (!testing::CapAddressSpace(size_t{16} << 20)) std::_Exit(1);
        try {
          (void)client->Get("big");
          outcome = testing::kValueFitted;
        } catch (const std::bad_alloc&) {
          if (!testing::LiftAddressSpaceCap()) std::_Exit(1);
          if (client->usable()) {
            Result<std::string> again = client->Get("big");  // in step: the whole value again
            if (!again.ok() || again->size() != size_t{32} << 20) outcome = 3;
          } else if (client->Ping().code() != StatusCode::kInternal) {
            outcome = 4;
          }
        }
        std::_Exit(outcome);
      },
      testing::CheckedOrFitted, "");
}

TEST(ClientConnectTest, ErrorsNameTheUrl) {
  Result<Client> bad = Client::Connect("http://nope");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  Result<Client> absent = Client::Connect("unix:///nonexistent/kvtier/kvtierd.sock");
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_NE(absent.status().message().find("unix:///nonexistent/kvtier/kvtierd.sock"),
            std::string::npos);
  EXPECT_NE(absent.status().message().find("is kvtierd running?"), std::string::npos);
}

// A host name goes through the resolver (localhost: /etc/hosts) and then to each address.
TEST(ClientConnectTest, ATcpNameIsResolvedAndEachAddressTried) {
  // Port 1 on loopback: nothing listens there, so every address refuses.
  Result<Client> refused =
      Client::Connect("tcp://localhost:1", {.timeout = std::chrono::seconds(5)});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("connect to tcp://localhost:1"), std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("is kvtierd running?"), std::string::npos)
      << refused.status().ToString();
}

// A Unix socket listening at a fresh path, that nobody serves unless the test does; removed with
// its directory at the end.
class TestListener {
 public:
  explicit TestListener(int backlog) {
    char dir_template[] = "/tmp/kvtier-listener-XXXXXX";
    EXPECT_NE(::mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
    path_ = dir_ + "/test.sock";
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    addr_.sun_family = AF_UNIX;
    std::memcpy(addr_.sun_path, path_.c_str(), path_.size());
    EXPECT_EQ(::bind(fd_.get(), address(), sizeof(addr_)), 0);
    EXPECT_EQ(::listen(fd_.get(), backlog), 0);
  }
  ~TestListener() {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }
  std::string url() const { return "unix://" + path_; }
  const sockaddr* address() const { return reinterpret_cast<const sockaddr*>(&addr_); }
  UniqueFd& fd() { return fd_; }

 private:
  std::string dir_;
  std::string path_;
  sockaddr_un addr_{};
  UniqueFd fd_;
};

// A daemon that does not accept (stalled, or stopping) with its accept queue full: the connect
// must give up at the timeout, not wait for room in the queue.
TEST(ClientConnectTest, UnixConnectHonoursTheTimeoutWhenTheAcceptQueueIsFull) {
  TestListener listener(/*backlog=*/0);
  std::vector<UniqueFd> queued;  // never accepted: they fill the queue
  for (int i = 0; i < 8; ++i) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (::connect(fd.get(), listener.address(), sizeof(sockaddr_un)) != 0) {
      ASSERT_EQ(errno, EAGAIN);
      break;
    }
    queued.push_back(std::move(fd));
  }
  ASSERT_FALSE(queued.empty());
  ConnectOptions options;
  options.timeout = std::chrono::milliseconds(200);
  auto connecting = std::async(std::launch::async,
                               [&] { return Client::Connect(listener.url(), options).status(); });
  const bool in_time = connecting.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!in_time) listener.fd().reset();  // wakes a connect still waiting, so that the test can end
  ASSERT_TRUE(in_time) << "connect ignored its 200 ms timeout";
  const Status status = connecting.get();
  EXPECT_EQ(status.code(), StatusCode::kTimeout) << status.ToString();
  EXPECT_NE(status.message().find(listener.path()), std::string::npos) << status.ToString();
}

// A daemon that refuses a request it cannot take (here: a bulk over its limit) answers an error
// and closes without reading the rest: the caller must hear that error, not "Broken pipe".
TEST(ClientConnectTest, TheDaemonsErrorBeforeItClosesIsWhatASendFailureReports) {
  TestListener listener(/*backlog=*/4);
  std::thread daemon([&] {
    UniqueFd conn(::accept(listener.fd().get(), nullptr, nullptr));
    std::vector<char> some(64 << 10);
    (void)::recv(conn.get(), some.data(), some.size(), 0);
    const std::string refusal = "-ERR Protocol error: invalid bulk length\r\n";
    (void)::send(conn.get(), refusal.data(), refusal.size(), MSG_NOSIGNAL);
  });  // closes the connection with the rest of the request unread
  Result<Client> client = Client::Connect(listener.url());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const Status set = client->Set("k", std::string(size_t{64} << 20, 'x'));
  daemon.join();
  EXPECT_EQ(set.code(), StatusCode::kInvalidArgument) << set.ToString();
  EXPECT_NE(set.message().find("invalid bulk length"), std::string::npos) << set.ToString();
  EXPECT_FALSE(client->usable());
  const Status later = client->Set("k", "v");
  EXPECT_NE(later.message().find("invalid bulk length"), std::string::npos) << later.ToString();
}

// A connection lost while a batch is written is a transport failure, even when the daemon had
// already answered an earlier command of the batch with an error: that error (a NOTFOUND for an
// unknown namespace) is that command's outcome, not why the connection ended.
TEST(ClientConnectTest, ASendFailureIsNotReportedAsAnEarlierCommandsError) {
  TestListener listener(/*backlog=*/4);
  std::thread daemon([&] {
    UniqueFd conn(::accept(listener.fd().get(), nullptr, nullptr));
    std::vector<char> some(64 << 10);
    (void)::recv(conn.get(), some.data(), some.size(), 0);
    const std::string answer = "-NOTFOUND namespace 00 is not registered\r\n";
    (void)::send(conn.get(), answer.data(), answer.size(), MSG_NOSIGNAL);
  });  // then closes in the middle of the large second command
  Result<Client> client = Client::Connect(listener.url());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Pipeline pipeline;
  pipeline.Add({"KVT.DROP", std::string(32, '0')});
  const std::string value(size_t{64} << 20, 'x');
  pipeline.Add({"SET", "k", value});
  const Status sent = client->Execute(pipeline).status();
  daemon.join();
  EXPECT_EQ(sent.code(), StatusCode::kDeviceError) << sent.ToString();
  EXPECT_EQ(sent.message().find("not registered"), std::string::npos) << sent.ToString();
  EXPECT_FALSE(client->usable());
  const Status later = client->Ping();
  EXPECT_EQ(later.code(), StatusCode::kDeviceError) << later.ToString();
  EXPECT_EQ(later.message().find("not registered"), std::string::npos) << later.ToString();
}

// The /tmp fallback of the default socket path is a name anyone can take first: a socket there
// is trusted only in a directory of this user's that no one else may write.
TEST(ClientConnectTest, TheTmpFallbackIsRefusedInADirectoryOthersMayWrite) {
  const std::string dir = TmpFallbackDir();
  if (::mkdir(dir.c_str(), 0700) != 0) GTEST_SKIP() << dir << " exists: not touched";
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  Result<Client> client = Client::Connect("unix://" + dir + "/kvtierd.sock");
  ::rmdir(dir.c_str());
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kPermissionDenied) << client.status().ToString();
  EXPECT_NE(client.status().message().find(dir), std::string::npos) << client.status().ToString();
}

TEST(ClientConnectTest, PasswordIsSentAndWrongOnesAreRefused) {
  InProcessDaemon server(
      InProcessDaemon::Options{.tcp = false, .password = "s3cret", .arena_bytes = 1 << 20});
  ConnectOptions options;
  options.password = "wrong";
  EXPECT_EQ(Client::Connect(server.url(), options).status().code(), StatusCode::kPermissionDenied);
  Result<Client> anonymous = Client::Connect(server.url());
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ(anonymous->Set("k", "v").code(), StatusCode::kPermissionDenied);
  options.password = "s3cret";
  options.client_name = "test";
  Result<Client> client = Client::Connect(server.url(), options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(client->Set("k", "v").ok());
}

}  // namespace
}  // namespace kvtier::client
