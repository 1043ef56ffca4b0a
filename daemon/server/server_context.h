// ServerContext: what every connection and command shares: the options, the store, the host
// arena and GPU pool it shares with clients (when it does), the generic namespace's id and the
// server's counters.
//
// The server owns one ServerContext and hands connections a reference; it outlives them all.
// Everything in it is immutable after Server::Create, an atomic counter, or a mutex, so any thread
// may use it without further locking.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "common/keys.h"
#include "common/thread_annotations.h"
#include "daemon/metrics/request_latency.h"
#include "daemon/server/disk_reads.h"
#include "daemon/server/generic_keys.h"
#include "daemon/server/gpu_importers.h"
#include "daemon/server/mover_waiters.h"
#include "daemon/server/server.h"

namespace kvtier::store {
class Store;
}
namespace kvtier::server {

struct ServerCounters {
  std::atomic<uint64_t> connected_clients{0};
  std::atomic<uint64_t> total_connections{0};
  std::atomic<uint64_t> commands_processed{0};
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> lapsed_reply_leases{0};
  std::atomic<uint64_t> stalled_reply_closes{0};
  std::atomic<uint64_t> staged_values{0};
  std::atomic<uint64_t> rejected_connections{0};
  std::atomic<uint64_t> failed_accepts{0};
};

// Before AUTH a client may only say hello: a stranger cannot make the server buffer much. These
// are the request parser's limits until then.
inline constexpr size_t kPreAuthBulkBytes = 4 << 10;
inline constexpr size_t kPreAuthArgs = 16;

// The host arena as clients map it (KVT.ATTACH): reservation and lease extents of `tier` are
// offsets into the memfd.
struct SharedArena {
  int fd = -1;  // borrowed from the store's host tier
  uint64_t bytes = 0;
  TierId tier = TierId::kHost;
};

struct ServerContext {
  ServerOptions options;
  store::Store& store;
  std::optional<SharedArena> arena;  // absent: no shared-memory path
  bool gpu_pool_shared = false;      // the store has a GPU tier, exported on KVT.GPUATTACH
  NamespaceId generic_ns;
  uint64_t start_time_us = 0;  // SteadyClock, for INFO's uptime
  uint16_t tcp_port = 0;       // the bound port, set by Start before any connection exists
  // A fresh key for a value reserved before the key it will be published under is free (a staged
  // SET value; a replacement reserved before the old value goes): "kvtier-s" in the high half, a
  // counter in the low one. Generic and token keys are XXH3-128 digests, so none of them is ever
  // equal to one of these.
  BlockKey PlaceholderKey() {
    return BlockKey{0x6b76746965722d73, next_staging_key.fetch_add(1, std::memory_order_relaxed)};
  }
  std::atomic<uint64_t> next_staging_key{1};
  ServerCounters counters;
  // The generic keys' names and expiry times. Generic SETs, GETs and DELs of one key take turns
  // under its stripe lock (chosen by the key's hash), so that a writer never meets another's
  // reservation, a reader never sees the moment between a SET's remove and its commit, and the
  // key's name and expiry change with its value: a Redis user expects the last SET to win and a
  // GET to see a value. A GET of a large value keeps its lease after the lock is released, until
  // the bytes are sent; a SET that meets it waits on a timer (Progress::kRetryLater). A lock is
  // held for one value's copy, or while SCAN, KEYS, FLUSHDB or the expiry sweep walk its stripe.
  GenericKeys generic_keys;
  // Shared with the store's move listener, which may run on a mover thread while the server is
  // being destroyed.
  std::shared_ptr<MoverWaiters> mover_waiters = std::make_shared<MoverWaiters>();
  // Connections that hold the GPU pool mapped, and whether shutdown has told them to let go
  // (Server::DrainGpuImporters): from then on their commands answer -SHUTDOWN.
  GpuImporters gpu_importers;
  std::atomic<bool> draining_gpu_importers{false};
  // How long lookups, gets and puts take (CommandContext::timed names what a command was).
  metrics::RequestLatency request_latency{options.latency_histograms};
  // Reads of blocks on a tier without an address, off the network threads. Last, so that it is
  // destroyed (its reads waited for) first.
  DiskReads disk_reads{store, options.disk_read_threads, mover_waiters};

  GenericKeys::Stripe& GenericStripe(const BlockKey& key) { return generic_keys.StripeOf(key); }
};

}  // namespace kvtier::server
