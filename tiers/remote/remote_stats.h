// Counters of a remote store client, and the one visitor that names them for /metrics, INFO and
// `kvtier stats`.
//
// RemoteCounters is what the client updates (relaxed atomics: any thread may read a snapshot while
// the I/O thread counts); RemoteStats is a plain snapshot of it. Monotonic except the gauges marked
// so.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>

namespace kvtier::tiers::remote {

struct RemoteStats {
  uint64_t batches = 0;             // Start*/blocking calls
  uint64_t requests = 0;            // commands sent (ASKING included), retries included
  uint64_t hits = 0;                // GET answered with a value
  uint64_t misses = 0;              // GET answered kNotFound
  uint64_t errors_timeout = 0;      // keys answered kTimeout
  uint64_t errors_unavailable = 0;  // keys answered kDeviceError: node unreachable, slot unserved
  uint64_t errors_server = 0;       // keys answered with a node's error reply (OOM, CLUSTERDOWN...)
  uint64_t errors_breaker = 0;      // keys refused at once because their node's breaker was open
  uint64_t errors_auth = 0;         // connections refused by AUTH
  uint64_t moved_redirects = 0;     // MOVED answers followed
  uint64_t ask_redirects = 0;       // ASK answers followed
  uint64_t replica_reads = 0;       // keys read again from a replica when their master failed
  uint64_t new_owner_resends = 0;   // keys sent again to their slot's new master after a failover
  uint64_t replica_lookups = 0;     // keys looked up at a replica first (lookups_on_replicas)
  uint64_t replica_lookup_fallbacks = 0;   // of those, asked at their master after all
  uint64_t topology_refreshes = 0;         // slot maps read
  uint64_t topology_refresh_failures = 0;  // refreshes where no node answered
  uint64_t breaker_openings = 0;    // episodes: a node's breaker opened after failures in a row
  uint64_t connections_opened = 0;  // TCP connections made (reconnects included)
  uint64_t bytes_out = 0;           // bytes written to nodes
  uint64_t bytes_in = 0;            // bytes read from nodes
  uint64_t masters = 0;             // gauge: masters in the current slot map
  uint64_t open_breakers = 0;       // gauge: nodes whose breaker is open now
};

// The live counters. Field meanings as in RemoteStats.
struct RemoteCounters {
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> errors_timeout{0};
  std::atomic<uint64_t> errors_unavailable{0};
  std::atomic<uint64_t> errors_server{0};
  std::atomic<uint64_t> errors_breaker{0};
  std::atomic<uint64_t> errors_auth{0};
  std::atomic<uint64_t> moved_redirects{0};
  std::atomic<uint64_t> ask_redirects{0};
  std::atomic<uint64_t> replica_reads{0};
  std::atomic<uint64_t> new_owner_resends{0};
  std::atomic<uint64_t> replica_lookups{0};
  std::atomic<uint64_t> replica_lookup_fallbacks{0};
  std::atomic<uint64_t> topology_refreshes{0};
  std::atomic<uint64_t> topology_refresh_failures{0};
  std::atomic<uint64_t> breaker_openings{0};
  std::atomic<uint64_t> connections_opened{0};
  std::atomic<uint64_t> bytes_out{0};
  std::atomic<uint64_t> bytes_in{0};
  std::atomic<uint64_t> masters{0};
  std::atomic<uint64_t> open_breakers{0};

  RemoteStats Snapshot() const;
};

// counter += n, relaxed: counters order nothing.
inline void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) {
  counter.fetch_add(n, std::memory_order_relaxed);
}

// Calls visit(name, value) once per RemoteStats field, in a fixed order, with stable snake_case
// names (the field names): the one list that /metrics, INFO and `kvtier stats` will render.
void VisitRemoteStats(const RemoteStats& stats,
                      const std::function<void(std::string_view name, double value)>& visit);

}  // namespace kvtier::tiers::remote
