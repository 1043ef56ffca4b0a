// RedisClusterClient against one plain redis-server (no cluster mode): the round trip, TTLs,
// credentials, a corrupted value, a server gone, and the client's own threading: many callers at
// once, a pool smaller than the callers, callbacks, and destruction with calls in flight. These
// run under ThreadSanitizer too (label "concurrency").
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tiers/remote/redis_cluster_client.h"
#include "tiers/remote/remote_record.h"
#include "tiers/remote/testing/redis_process.h"
#include "tiers/remote/testing/test_tls.h"
#include "tiers/remote/testing/test_values.h"

namespace kvtier::tiers::remote {
namespace {

using std::chrono::milliseconds;
using testing::RedisProcess;
using testing::TestKey;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTtl{600'000};
constexpr milliseconds kCallTimeout{5'000};

class SingleServer : public ::testing::Test {
 protected:
  void StartServer(const std::vector<std::string>& args = {}) {
    auto server = RedisProcess::Start(dir_.path(), args);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  Result<std::unique_ptr<RedisClusterClient>> Open(RedisClusterOptions options = {}) {
    options.seeds = {server_->address()};
    options.connect_timeout = milliseconds(300);
    return RedisClusterClient::Open(std::move(options));
  }

  std::unique_ptr<RedisClusterClient> OpenOrFail(RedisClusterOptions options = {}) {
    auto client = Open(std::move(options));
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(client).value() : nullptr;
  }

  // With a server started with `--timeout 1`: a connection the server closed while it sat idle in
  // the pool (the pool's only one) is not handed out; the next calls open another and succeed,
  // and no call fails as the node's fault.
  void ExpectAConnectionClosedWhileIdleIsNotUsed(RedisClusterOptions options) {
    options.connections_per_node = 1;
    auto client = OpenOrFail(std::move(options));
    ASSERT_TRUE(client);
    const std::string value = testing::TestRecord(1, 512);
    ASSERT_EQ(client->Set({{TestKey(1), {value}}}, kTtl, kCallTimeout)[0], Status::Ok());
    std::this_thread::sleep_for(milliseconds(2500));  // the server closes the idle connection
    EXPECT_EQ(client->Set({{TestKey(2), {value}}}, kTtl, kCallTimeout)[0], Status::Ok());
    const auto got = client->Get({TestKey(1)}, kCallTimeout);
    ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
    EXPECT_EQ(*got[0], value);
    EXPECT_EQ(client->stats().breaker_openings, 0u);
  }

  testing::TempDir dir_;
  std::unique_ptr<RedisProcess> server_;
};

TEST_F(SingleServer, RoundTripWithTtlOnAPlainServer) {
  StartServer();
  auto client = OpenOrFail();
  ASSERT_TRUE(client);
  EXPECT_FALSE(client->cluster_mode());
  EXPECT_EQ(client->Masters(), std::vector<std::string>{server_->address().ToString()});

  // A record sent as two pieces (header, payload), the way the tier will send blocks.
  const auto payload = testing::TestPayload(1, 100'000);
  const auto header = EncodeRecordHeader(testing::TestNamespace(), testing::TestBlock(1), payload);
  const std::vector<std::string_view> parts = {
      {reinterpret_cast<const char*>(header.data()), header.size()},
      {reinterpret_cast<const char*>(payload.data()), payload.size()}};
  EXPECT_EQ(client->Set({{TestKey(1), parts}}, kTtl, kCallTimeout)[0], Status::Ok());
  const auto got = client->Get({TestKey(1), TestKey(2)}, kCallTimeout);
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_EQ(*got[0], testing::TestRecord(1, 100'000));
  EXPECT_EQ(got[1].status().code(), StatusCode::kNotFound);
  const auto exists = client->Exists({TestKey(1), TestKey(2)}, kCallTimeout);
  EXPECT_EQ(exists[0], Status::Ok());
  EXPECT_EQ(exists[1].code(), StatusCode::kNotFound);

  // SET ... PX: the key carries the time to live.
  const auto pttl = testing::Cli(server_->port(), {"PTTL", TestKey(1)});
  ASSERT_TRUE(pttl.ok());
  EXPECT_GT(std::stoll(*pttl), 500'000);
  EXPECT_LE(std::stoll(*pttl), kTtl.count());
  EXPECT_EQ(client->Set({{TestKey(3), {"x"}}}, milliseconds(0), kCallTimeout)[0].code(),
            StatusCode::kInvalidArgument);
}

// A server that speaks TLS only (port 0, tls-port), with a certificate of the tests' own CA for
// 127.0.0.1 and "redis.test"; clients need no certificate of their own unless `client_auth`.
class TlsServer : public SingleServer {
 protected:
  void SetUp() override {
    auto certificates = testing::MakeTestCertificates(dir_.path());
    ASSERT_TRUE(certificates.ok()) << certificates.status().ToString();
    certs_ = *certificates;
  }

  void StartTlsServer(std::vector<std::string> more_args = {}) {
    std::vector<std::string> args = {
        "--port", "0", "--tls-port", std::string(RedisProcess::kPortPlaceholder),
        "--tls-cert-file", certs_.server_cert_file, "--tls-key-file", certs_.server_key_file,
        "--tls-ca-cert-file", certs_.ca_file, "--tls-auth-clients", "no"};
    args.insert(args.end(), more_args.begin(), more_args.end());
    StartServer(args);
  }

  RedisClusterOptions TlsOptionsWith(std::string ca_file) const {
    RedisClusterOptions options;
    options.tls.enabled = true;
    options.tls.ca_file = std::move(ca_file);
    return options;
  }

  testing::TestCertificates certs_;
};

TEST_F(TlsServer, RoundTripOverTls) {
  StartTlsServer();
  auto client = OpenOrFail(TlsOptionsWith(certs_.ca_file));
  ASSERT_TRUE(client);
  const std::string record = testing::TestRecord(1, 300'000);
  EXPECT_EQ(client->Set({{TestKey(1), {record}}}, kTtl, kCallTimeout)[0], Status::Ok());
  const auto got = client->Get({TestKey(1), TestKey(2)}, kCallTimeout);
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_EQ(*got[0], record);  // read in place through TLS, a large value whole
  EXPECT_EQ(got[1].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->Exists({TestKey(1)}, kCallTimeout)[0], Status::Ok());
}

// As PooledConnectionsTheServerClosedWhileIdleAreNotUsed, under TLS: the server's close_notify
// waits unread before the end of the stream, so bytes waiting on an idle connection do not tell
// it is still open.
TEST_F(TlsServer, PooledConnectionsTheServerClosedWhileIdleAreNotUsed) {
  StartTlsServer({"--timeout", "1"});
  ExpectAConnectionClosedWhileIdleIsNotUsed(TlsOptionsWith(certs_.ca_file));
}

TEST_F(TlsServer, ACertificateThatDoesNotVerifyIsRefusedAtOpenWithTheReason) {
  StartTlsServer();
  // Another CA.
  Status refused = Open(TlsOptionsWith(certs_.other_ca_file)).status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.ToString();
  EXPECT_NE(refused.message().find("TLS handshake"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("certificate verify failed"), std::string::npos)
      << refused.ToString();
  // The right CA, but a name the certificate does not carry.
  RedisClusterOptions wrong_name = TlsOptionsWith(certs_.ca_file);
  wrong_name.tls.server_name = "not-redis.test";
  refused = Open(wrong_name).status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.ToString();
  EXPECT_NE(refused.message().find("not-redis.test"), std::string::npos) << refused.ToString();
  // The name it carries, asked for by name while reached by address.
  RedisClusterOptions by_name = TlsOptionsWith(certs_.ca_file);
  by_name.tls.server_name = "redis.test";
  EXPECT_TRUE(Open(by_name).ok());
  // Refused even by a client that starts while its store is down (as kvtierd does): the
  // configuration is wrong, waiting would not help.
  RedisClusterOptions patient = TlsOptionsWith(certs_.other_ca_file);
  patient.open_unreachable = true;
  EXPECT_EQ(Open(patient).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(TlsServer, APlainClientOfATlsServerAndBadFilesAreClearErrors) {
  StartTlsServer();
  // Plain RESP to a TLS port: the server drops the connection; no seed answered.
  EXPECT_EQ(Open().status().code(), StatusCode::kDeviceError);
  RedisClusterOptions missing = TlsOptionsWith(dir_.path() + "/no-such-ca.crt");
  const Status st = Open(missing).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no-such-ca.crt"), std::string::npos) << st.ToString();
  RedisClusterOptions half = TlsOptionsWith(certs_.ca_file);
  half.tls.cert_file = certs_.server_cert_file;  // a certificate without its key
  EXPECT_EQ(Open(half).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SingleServer, WrongPasswordIsAClearErrorThatHidesThePassword) {
  StartServer({"--requirepass", "right-secret"});
  RedisClusterOptions wrong;
  wrong.password = "wrong-secret-123";
  const Status refused = Open(wrong).status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.ToString();
  EXPECT_NE(refused.message().find("WRONGPASS"), std::string::npos) << refused.message();
  EXPECT_EQ(refused.message().find("wrong-secret-123"), std::string::npos);
  // No password at all: the server's NOAUTH, also a permission error.
  EXPECT_EQ(Open().status().code(), StatusCode::kPermissionDenied);

  RedisClusterOptions right;
  right.password = "right-secret";
  auto client = OpenOrFail(right);
  ASSERT_TRUE(client);
  EXPECT_EQ(client->Set({{"k", {"v"}}}, kTtl, kCallTimeout)[0], Status::Ok());
}

TEST_F(SingleServer, AclUserAndPassword) {
  StartServer({"--user", "kv", "on", ">kv-secret", "~kvt1:*", "+@all"});
  RedisClusterOptions options;
  options.user = "kv";
  options.password = "not-it";
  const Status refused = Open(options).status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.message().find("user 'kv'"), std::string::npos) << refused.message();
  options.password = "kv-secret";
  auto client = OpenOrFail(options);
  ASSERT_TRUE(client);
  EXPECT_EQ(client->Set({{TestKey(1), {"v"}}}, kTtl, kCallTimeout)[0], Status::Ok());
  // The ACL allows kvt1:* only: another key is the server's NOPERM, a permission error.
  EXPECT_EQ(client->Set({{"other", {"v"}}}, kTtl, kCallTimeout)[0].code(),
            StatusCode::kPermissionDenied);
}

TEST_F(SingleServer, CorruptedOrForeignValueDecodesAsAnErrorNeverBytes) {
  StartServer();
  auto client = OpenOrFail();
  ASSERT_TRUE(client);
  const std::string record = testing::TestRecord(5, 4096);
  ASSERT_EQ(client->Set({{TestKey(5), {record}}, {TestKey(6), {record}}}, kTtl, kCallTimeout)[0],
            Status::Ok());
  // One payload byte changed in place, as a bit flip or a stray write would.
  ASSERT_TRUE(testing::Cli(server_->port(), {"SETRANGE", TestKey(5), "1000", "X"}).ok());
  ASSERT_TRUE(testing::Cli(server_->port(), {"SET", TestKey(7), "not a kvtier record"}).ok());
  const auto got = client->Get({TestKey(5), TestKey(6), TestKey(7)}, kCallTimeout);
  ASSERT_TRUE(got[0].ok() && got[1].ok() && got[2].ok());
  const auto ns = testing::TestNamespace();
  EXPECT_EQ(DecodeRecord(*got[0], ns, testing::TestBlock(5)).status().code(),
            StatusCode::kChecksumMismatch);
  // The intact record stored under another block's key names the mix-up.
  EXPECT_EQ(DecodeRecord(*got[1], ns, testing::TestBlock(6)).status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(DecodeRecord(*got[2], ns, testing::TestBlock(7)).status().code(),
            StatusCode::kCorruption);
}

TEST_F(SingleServer, ServerGoneGivesErrorsNotHangs) {
  StartServer();
  auto client = OpenOrFail();
  ASSERT_TRUE(client);
  ASSERT_EQ(client->Set({{"k", {"v"}}}, kTtl, kCallTimeout)[0], Status::Ok());
  const HostPort address = server_->address();
  server_->Kill();
  const auto start = Clock::now();
  const auto got = client->Get({"k"}, milliseconds(300));
  EXPECT_EQ(got[0].status().code(), StatusCode::kDeviceError) << got[0].status().ToString();
  EXPECT_LT(Clock::now() - start, milliseconds(800));
  RedisClusterOptions options;
  options.seeds = {address};
  options.connect_timeout = milliseconds(300);
  const Status refused = RedisClusterClient::Open(options).status();
  EXPECT_EQ(refused.code(), StatusCode::kDeviceError);
  EXPECT_NE(refused.message().find(address.ToString()), std::string::npos);
}

TEST_F(SingleServer, OpenedWhileTheServerHangsItFailsFastThenReachesTheServer) {
  StartServer();
  server_->Stop();  // accepts connections, answers nothing
  RedisClusterOptions options;
  options.open_unreachable = true;
  options.breaker.initial_backoff = milliseconds(50);
  options.breaker.max_backoff = milliseconds(200);
  auto client = OpenOrFail(options);
  ASSERT_TRUE(client);
  EXPECT_FALSE(client->reached());
  const auto start = Clock::now();
  const auto got = client->Get({"k"}, kCallTimeout);
  EXPECT_EQ(got[0].status().code(), StatusCode::kDeviceError);
  EXPECT_NE(got[0].status().message().find("has not answered yet"), std::string::npos)
      << got[0].status().ToString();
  EXPECT_LT(Clock::now() - start, kCallTimeout);  // at once, not at the call's deadline

  server_->Continue();
  ASSERT_TRUE(testing::PollUntil(milliseconds(10'000), [&] { return client->reached(); }));
  EXPECT_FALSE(client->cluster_mode());
  EXPECT_EQ(client->Set({{"k", {"v"}}}, kTtl, kCallTimeout)[0], Status::Ok());
  const auto again = client->Get({"k"}, kCallTimeout);
  ASSERT_TRUE(again[0].ok()) << again[0].status().ToString();
  EXPECT_EQ(*again[0], "v");
}

TEST_F(SingleServer, OpenUnreachableStillRefusesAWrongPassword) {
  StartServer({"--requirepass", "right"});
  RedisClusterOptions options;
  options.open_unreachable = true;
  options.password = "wrong";
  EXPECT_EQ(Open(options).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(SingleServer, AUserWhoMayNotReadTheTopologyIsRefusedAtOpen) {
  StartServer({"--user", "kv", "on", ">kv-pass", "~*", "+@all", "-info"});
  RedisClusterOptions options;
  options.open_unreachable = true;  // a refusal is not an outage: Open still fails
  options.user = "kv";
  options.password = "kv-pass";
  const Status refused = Open(options).status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.ToString();
  EXPECT_NE(refused.message().find("NOPERM"), std::string::npos) << refused.ToString();
}

TEST_F(SingleServer, ManyCallersShareASmallPool) {
  StartServer();
  RedisClusterOptions options;
  options.connections_per_node = 2;  // fewer than the callers: some wait for a connection
  auto client = OpenOrFail(options);
  ASSERT_TRUE(client);
  constexpr int kThreads = 6;
  constexpr int kCalls = 40;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        const uint64_t block = static_cast<uint64_t>(t * 1000 + c);
        const std::string value = testing::TestRecord(block, 512);
        if (!client->Set({{TestKey(block), {value}}}, kTtl, kCallTimeout)[0].ok()) ++wrong;
        const auto got = client->Get({TestKey(block)}, kCallTimeout);
        if (!got[0].ok() || *got[0] != value) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(client->stats().connections_opened, 3u);  // the pool, plus Open's topology query
}

// Lookups with a short timeout that wait behind the client's own long call (a mover's SET held
// up by the server) time out in the pool: that is no failure of the node, whose breaker must
// stay closed, and the connection must not be given up.
TEST_F(SingleServer, CallsThatTimeOutWaitingForABusyPoolLeaveTheBreakerClosed) {
  StartServer();
  RedisClusterOptions options;
  options.connections_per_node = 1;
  auto client = OpenOrFail(options);
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->Exists({TestKey(0)}, kCallTimeout)[0].code() == StatusCode::kNotFound);
  const uint64_t opened = client->stats().connections_opened;
  ASSERT_TRUE(testing::Cli(server_->port(), {"CLIENT", "PAUSE", "700", "WRITE"}).ok());
  const std::string value = testing::TestRecord(1, 512);
  std::promise<Status> set;
  client->StartSet({{TestKey(1), {value}}}, kTtl, kCallTimeout,
                   [&](std::vector<Status> statuses) { set.set_value(statuses[0]); });
  std::this_thread::sleep_for(milliseconds(50));  // the SET holds the one connection
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(client->Exists({TestKey(2)}, milliseconds(20))[0].code(), StatusCode::kTimeout);
  }
  EXPECT_EQ(set.get_future().get(), Status::Ok());
  EXPECT_EQ(client->stats().breaker_openings, 0u);
  EXPECT_EQ(client->Exists({TestKey(1)}, kCallTimeout)[0], Status::Ok());
  EXPECT_EQ(client->stats().connections_opened, opened);
}

// Redis closes a connection idle for `timeout` seconds: the pool must not hand that one out.
TEST_F(SingleServer, PooledConnectionsTheServerClosedWhileIdleAreNotUsed) {
  StartServer({"--timeout", "1"});
  ExpectAConnectionClosedWhileIdleIsNotUsed({});
}

TEST_F(SingleServer, CallbacksRunOnTheClientThreadWhereBlockingCallsRefuse) {
  StartServer();
  auto client = OpenOrFail();
  ASSERT_TRUE(client);
  std::promise<Status> inside;
  client->StartGet({"missing"}, kCallTimeout, [&](std::vector<Result<std::string>> values) {
    EXPECT_EQ(values[0].status().code(), StatusCode::kNotFound);
    // A blocking call here would wait on this very thread: it answers kInternal instead.
    inside.set_value(client->Get({"missing"}, kCallTimeout)[0].status());
  });
  EXPECT_EQ(inside.get_future().get().code(), StatusCode::kInternal);
}

TEST_F(SingleServer, DestructionAnswersCallsInFlight) {
  StartServer();
  auto client = OpenOrFail();
  ASSERT_TRUE(client);
  server_->Stop();  // calls now wait for their (long) timeout
  std::promise<Status> answered;
  client->StartGet({"k"}, milliseconds(60'000), [&](std::vector<Result<std::string>> values) {
    answered.set_value(values[0].status());
  });
  const auto start = Clock::now();
  client.reset();
  auto answer = answered.get_future();
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_FALSE(answer.get().ok());
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  server_->Continue();
}

}  // namespace
}  // namespace kvtier::tiers::remote
