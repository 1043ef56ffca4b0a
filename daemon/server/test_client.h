// Test support for the server: a Server started inside the test process on a temporary Unix
// socket and an ephemeral TCP port, over a real Store on a HostTier (below a FakeGpuTier shared
// with clients, when asked for), and a plain-socket client
// that sends raw RESP and returns the raw bytes of each reply, so tests compare replies byte for
// byte.
//
// TestServer owns the tiers, the store (on a FakeClock), the server and the temporary directory.
// TestClient owns one socket. Both are used from the test's threads; a TestClient is not
// thread-safe (one per thread).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/keys.h"
#include "common/resp/reply.h"
#include "daemon/server/server.h"
#include "daemon/store/store.h"
#include "tiers/gpu/fake_gpu_tier.h"
#include "tiers/host/host_tier.h"

namespace kvtier::server::testing {

// Encodes a command as a RESP array of bulk strings.
std::string Resp(const std::vector<std::string>& args);
std::string Resp(std::initializer_list<std::string_view> args);

// The RESP bulk string of `s`, as a reply carries it.
std::string Bulk(std::string_view s);
// `bytes` of a deterministic pattern that varies with `seed`, with no short period, so a value
// read back from the wrong offset or the wrong block differs.
std::string Value(size_t bytes, char seed);
// Compares replies without printing megabytes: the sizes, the first differing offset and a few
// bytes from there.
::testing::AssertionResult SameReply(const std::string& got, const std::string& want);
// The one reply in `raw` (a failed expectation, and a null reply, when there is none).
resp::Reply ParseReply(const std::string& raw);
// The value of `name` in a map reply (a RESP2 map is a flat array of names and values); a null
// reply when it has none.
const resp::Reply& MapValue(const resp::Reply& map, std::string_view name);

// Block keys for tests: distinct, deterministic.
BlockKey TestKey(uint64_t n);
// The packed-key argument (16 big-endian bytes per key).
std::string PackKeys(const std::vector<BlockKey>& keys);

// Polls `condition` every millisecond until it holds or `timeout` passes. For effects the server
// produces asynchronously (a closed connection ending its session), not to order a race.
bool WaitFor(const std::function<bool()>& condition,
             std::chrono::milliseconds timeout = std::chrono::seconds(10));

// How many commands the server's request latency histograms (metrics::RequestLatency) counted
// under these labels, and under any labels.
uint64_t TimedCommands(Server& server, metrics::RequestOp op, metrics::RequestPath path,
                       std::optional<TierId> tier);
uint64_t TimedCommands(Server& server);

class TestClient {
 public:
  static TestClient ConnectUnix(const std::string& path);
  static TestClient ConnectTcp(uint16_t port);
  TestClient() = default;
  ~TestClient();
  TestClient(TestClient&& other) noexcept;
  TestClient& operator=(TestClient&& other) noexcept;

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Sends all of `bytes`; false when the connection is gone.
  bool Send(std::string_view bytes);
  // Sends the command and returns the raw bytes of its reply ("" on timeout or close).
  std::string Call(std::initializer_list<std::string_view> args);
  std::string Call(const std::vector<std::string>& args);
  // The raw bytes of the next complete reply; "" on timeout or when the server closed first.
  std::string ReadReply(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Everything until the server closes the connection. `closed` says whether it did in time.
  std::string ReadUntilClosed(bool* closed,
                              std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // A descriptor received with SCM_RIGHTS so far (oldest first), or -1. The caller owns it.
  int TakeReceivedFd();
  // Number of descriptors received so far and not taken.
  size_t received_fds() const { return fds_.size(); }
  // Shuts down the sending side (the server sees end of stream); reading still works.
  void ShutdownWrite();
  void Close();

 private:
  explicit TestClient(int fd) : fd_(fd) {}
  // One recvmsg into pending_, waiting up to `timeout`; false on timeout, close or error.
  bool ReceiveMore(std::chrono::milliseconds timeout, bool* closed);

  int fd_ = -1;
  std::string pending_;
  std::vector<int> fds_;
};

class TestServer {
 public:
  // Fills in unix_path (a fresh temporary directory) and, unless a TCP port is set, tcp_ephemeral.
  // With `with_arena` false the server gets no host arena (no shared-memory path). With
  // `gpu_pool_bytes` > 0 the store's tiers are [FakeGpuTier of that size, HostTier] and the server
  // shares the fake pool (KVT.GPUATTACH). Puts land in the host tier; a block reaches the GPU tier
  // when the store promotes it (read twice, then Store::PromoteCandidates) or through PlaceBlock.
  explicit TestServer(ServerOptions options = {}, bool with_arena = true,
                      uint64_t capacity_bytes = uint64_t{64} << 20, uint64_t gpu_pool_bytes = 0);
  // With the given GPU tier (a GpuTier, on a machine with a device) above a 64 MiB host arena,
  // shared with clients.
  TestServer(ServerOptions options, std::unique_ptr<tiers::DeviceTier> gpu_pool);
  // With `below_host` (a FakeTier standing in for NVMe, say) below a 64 MiB host arena and the
  // store built with `store_options`. Nothing runs the tier mover: a test does its work itself
  // (Store::WriteThrough, Store::Fetch, ...).
  TestServer(ServerOptions options, store::StoreOptions store_options,
             std::unique_ptr<tiers::Tier> below_host);
  ~TestServer();

  // OK when the server runs; every accessor below needs it.
  const Status& status() const { return status_; }
  Server& server() { return *server_; }
  store::Store& store() { return *store_; }
  tiers::HostTier& tier() { return *tier_; }
  // The GPU tier; nullptr without one.
  tiers::DeviceTier* gpu() { return gpu_.get(); }
  FakeClock& clock() { return clock_; }
  const std::string& unix_path() const { return options_.unix_path; }
  uint16_t tcp_port() const { return server_->tcp_port(); }

  // Puts a ready block straight into `tier` (one the store has): allocated and written through
  // the tier, then adopted by the store, wherever the store's placement would have put it.
  Status PlaceBlock(TierId tier, const NamespaceId& ns, const BlockKey& key,
                    std::span<const std::byte> bytes);

  TestClient ConnectUnix() { return TestClient::ConnectUnix(unix_path()); }
  TestClient ConnectTcp() { return TestClient::ConnectTcp(tcp_port()); }
  // Waits until exactly `n` clients are connected (closed ones have ended their sessions).
  bool WaitForClients(uint64_t n);
  // Waits until exactly `n` leases are open in the store. A large value sent from its slot has its
  // lease ended just after the last bytes go out, a moment after the client may have read them.
  bool WaitForLeases(uint64_t n);

 private:
  ServerOptions options_;
  std::string dir_;
  FakeClock clock_;
  Status Init(bool with_arena, uint64_t capacity_bytes, std::unique_ptr<tiers::DeviceTier> gpu);

  std::unique_ptr<tiers::DeviceTier> gpu_;
  std::unique_ptr<tiers::HostTier> tier_;
  store::StoreOptions store_options_;
  std::unique_ptr<tiers::Tier> below_host_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Server> server_;
  Status status_;
};

}  // namespace kvtier::server::testing
