#include "client/testing/in_process_daemon.h"

#include <cstdio>
#include <cstdlib>

namespace kvtier::client::testing {
namespace {

// Longer than every lease and reservation timeout a test store uses (30 s by default), so one
// step of the clock lapses them all.
constexpr uint64_t kPastEveryDeadlineUs = uint64_t{3600} * 1'000'000;

}  // namespace

InProcessDaemon::InProcessDaemon(Options options) {
  server::ServerOptions server_options;
  server_options.password = options.password;
  if (options.max_clients > 0) server_options.max_clients = options.max_clients;
  server_ = std::make_unique<server::testing::TestServer>(
      server_options, /*with_arena=*/true, options.arena_bytes, options.gpu_pool_bytes);
  if (!server_->status().ok()) {
    std::fprintf(stderr, "in-process daemon: %s\n", server_->status().ToString().c_str());
    std::abort();
  }
  proxy_ = std::make_unique<FaultProxy>(server_->unix_path());
  url_ = options.tcp ? "tcp://127.0.0.1:" + std::to_string(server_->tcp_port()) : proxy_->url();
}

// The proxy goes first: its links hold connections to the server.
InProcessDaemon::~InProcessDaemon() { proxy_.reset(); }

size_t InProcessDaemon::block_count() { return server_->store().Stats().blocks_present; }

void InProcessDaemon::ExpireEverything() {
  server_->clock().AdvanceMicros(kPastEveryDeadlineUs);
  (void)server_->store().ExpireDeadlines();
}

void InProcessDaemon::ExpireLeasesBeforeRelease() {
  proxy_->OnCommand("KVT.RELEASE", [this] { ExpireEverything(); });
}

void InProcessDaemon::ExpireReservationsBeforeCommit() {
  proxy_->OnCommand("KVT.COMMIT", [this] { ExpireEverything(); });
}

Status InProcessDaemon::PlaceOutsideArena(const NamespaceId& ns, const BlockKey& key,
                                          std::span<const std::byte> bytes) {
  return server_->PlaceBlock(TierId::kGpu, ns, key, bytes);
}

}  // namespace kvtier::client::testing
