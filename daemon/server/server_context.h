// ServerContext: what every connection and command shares: the options, the store, the optional
// host arena, the generic namespace's id and the server's counters.
//
// The server owns one ServerContext and hands connections a reference; it outlives them all.
// Everything in it is either immutable after Server::Create or an atomic counter, so any thread may
// read it without a lock.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/keys.h"
#include "daemon/server/server.h"

namespace kvtier::store {
class Store;
}
namespace kvtier::tiers {
class HostTier;
}

namespace kvtier::server {

struct ServerCounters {
  std::atomic<uint64_t> connected_clients{0};
  std::atomic<uint64_t> total_connections{0};
  std::atomic<uint64_t> commands_processed{0};
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> rejected_connections{0};
};

struct ServerContext {
  ServerOptions options;
  store::Store& store;
  tiers::HostTier* arena;  // nullable: no shared-memory path
  NamespaceId generic_ns;
  uint64_t start_time_us = 0;  // SteadyClock, for INFO's uptime
  uint16_t tcp_port = 0;       // the bound port, set by Start before any connection exists
  ServerCounters counters;
};

}  // namespace kvtier::server
