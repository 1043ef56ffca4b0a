// InProcessDaemon: kvtierd's own server and store, started inside a client test process, for the
// client library's tests and the CLI's. It is the daemon's TestServer (daemon/server/
// test_client.h: the real Server over a real Store on a HostTier, on a FakeClock) with a
// FaultProxy in front of its Unix socket, so the client talks to the real protocol and the
// tests can still script the faults a daemon produces only under timing.
//
// Over Unix (the default) the client reaches the server through the proxy: commands() and the
// proxy's knobs (faults()) apply. Over TCP it reaches the server directly and no knob applies.
// Only test binaries link this (through kvtier_server_testing); libkvtier never links the daemon.
//
// Owned by one test; the accessors may be called from the test's threads while clients run.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "client/testing/fault_proxy.h"
#include "common/keys.h"
#include "common/status.h"
#include "daemon/server/test_client.h"

namespace kvtier::client::testing {

class InProcessDaemon {
 public:
  struct Options {
    bool tcp = false;      // the url is the server's TCP port (no proxy, no knobs)
    std::string password;  // non-empty: AUTH required
    uint64_t arena_bytes = uint64_t{4} << 20;  // the host tier, shared with attached clients
    // > 0: a fake GPU tier of this size above the host tier. A block placed there with
    // PlaceOutsideArena is one an attached client cannot lease (KVT.ACQUIRE answers NOTFOUND) and
    // must read inline, as a block on NVMe or in a pool it has not mapped.
    uint64_t gpu_pool_bytes = 0;
    size_t max_clients = 0;  // > 0: the server's connection limit (kvtierd's own otherwise)
  };

  // Starts the server (and the proxy). Aborts the test binary when that fails.
  explicit InProcessDaemon(Options options);
  InProcessDaemon() : InProcessDaemon(Options{}) {}
  ~InProcessDaemon();
  InProcessDaemon(const InProcessDaemon&) = delete;
  InProcessDaemon& operator=(const InProcessDaemon&) = delete;

  std::string url() const { return url_; }
  FaultProxy& faults() { return *proxy_; }
  server::testing::TestServer& server() { return *server_; }

  // Upper-case names of every command received over Unix, in order.
  std::vector<std::string> commands() const { return proxy_->commands(); }
  // Ready blocks in the store, every namespace (the generic keyspace's values included).
  size_t block_count();

  // From now on every KVT.RELEASE finds the leases it names lapsed: when it arrives, the store's
  // clock passes every deadline and the expiry that kvtierd runs periodically runs.
  void ExpireLeasesBeforeRelease();
  // The same for KVT.COMMIT and the reservations it names.
  void ExpireReservationsBeforeCommit();
  // Puts a ready block of `bytes` under `key` in the GPU tier (gpu_pool_bytes > 0).
  Status PlaceOutsideArena(const NamespaceId& ns, const BlockKey& key,
                           std::span<const std::byte> bytes);

 private:
  // Moves the clock past every lease and reservation deadline and expires them.
  void ExpireEverything();

  std::unique_ptr<server::testing::TestServer> server_;
  std::unique_ptr<FaultProxy> proxy_;
  std::string url_;
};

}  // namespace kvtier::client::testing
