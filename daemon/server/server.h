// Server: the network front of kvtierd. It accepts clients on a Unix socket and on TCP, speaks the
// RESP protocol of docs/protocol.md and serves every command from the in-process store.
//
// Each connection is one coroutine (daemon/server/connection.h) that reads requests, runs them
// against the store and writes the replies. Connections end their reservations and leases when
// they close, so a client killed mid-put or mid-get leaves no partial block and no pinned block.
//
// Ownership: the server borrows the store (which must outlive it) and shares with clients the
// memory the store exports (Store::ExportForClients: the host arena, the GPU pool); it owns its
// listeners, its connections and its I/O threads. Threads: Create, Start, Stop and the destructor
// are called by the owner (one thread, not concurrently); tcp_port(), unix_path() and Stats() may
// be called from any thread. Start runs `io_threads` threads named "kvtier-io-<n>", joined by Stop
// (which the destructor calls).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/metrics/stats_format.h"

namespace kvtier::store {
class Store;
}

namespace kvtier::server {

struct ServerOptions {
  // Unix socket path; empty: no Unix listener. A stale socket file (nobody listening) is replaced;
  // any other file at the path is an error. The socket is chmod-ed to unix_mode before listening.
  std::string unix_path;
  uint32_t unix_mode = 0660;
  // Unix clients whose uid (SO_PEERCRED) may connect; empty: any uid.
  std::vector<uid_t> allowed_uids;
  // TCP listener. tcp_port 0 turns TCP off unless tcp_ephemeral asks for a port chosen by the
  // kernel (tests; read it back with tcp_port()). tcp_host is an IP literal or "localhost". A
  // non-loopback host needs a password: an open cache on the network would serve any prompt's KV.
  std::string tcp_host = "127.0.0.1";
  uint16_t tcp_port = 0;
  bool tcp_ephemeral = false;
  int io_threads = 2;
  // Empty: no AUTH required. Otherwise every client must AUTH (or HELLO ... AUTH) first.
  std::string password;
  // Why a tier is absent, for INFO and KVT.STATS ("no GPU tier: built without CUDA"); empty when
  // the tier runs.
  std::string gpu_tier_note;
  std::string nvme_tier_note;
  // Share the store's host arena with clients on the Unix socket (KVT.ATTACH, KVT.RESERVE,
  // KVT.ACQUIRE, and large SET values received straight into their slot). false, or a store with
  // no host tier: those commands answer an error and only the inline commands work.
  bool shared_memory = true;

  // Frame limits of the request parser (see docs/protocol.md, Limits).
  size_t max_bulk_bytes = size_t{512} << 20;
  size_t max_array_len = size_t{1} << 20;
  size_t max_inline_bytes = size_t{64} << 10;
  size_t max_command_bytes = size_t{1} << 30;
  // Command limits.
  size_t max_key_bytes = size_t{64} << 10;  // generic keys
  // Bytes of generic key names the daemon keeps (GenericKeys): a SET of a new key past this
  // answers BUSY. The names live in the daemon's heap, not in the host tier, so without a bound
  // long names with tiny values could take more memory than the node has.
  size_t max_generic_name_bytes = size_t{256} << 20;
  // KEYS answers an error instead of walking a key space with more keys than this (SCAN walks
  // it in steps); 0: KEYS is refused unless the key space is empty.
  size_t max_keys_reply = 100'000;
  size_t max_lookup_keys = 65536;  // packed keys per KVT.* call
  // Reply bytes a client may have pending before the server stops reading from it.
  size_t max_inflight_bytes_per_client = size_t{1} << 30;
  // A connection that completes no command and accepts no reply bytes for this long is closed;
  // 0: never. A request trickling in a byte at a time does not count as activity.
  uint64_t idle_timeout_ms = 0;
  // SET, MSET and DEL of a value that another client is still receiving (a large GET reply goes
  // out straight from the value's slot, under a lease) wait this long for it, then answer BUSY.
  // Well below the client's default timeout (10 s), so that a client waiting on its defaults hears
  // BUSY rather than timing out and losing its connection (client_test checks the two).
  uint64_t reader_wait_ms = 5'000;
  // A large reply goes out straight from the value's slot, in pieces of up to 4 MiB, each under
  // a lease renewed just before it. A client that has not taken a piece within this time is
  // disconnected: once the lease lapses (store.lease_timeout_ms) the slot may hold another block,
  // and no later send may read from it. Kept below the lease timeout (kvtierd: half of it).
  uint64_t payload_send_timeout_ms = 15'000;
  // A put that finds the host tier full, or a read of a block on NVMe, waits this long for the
  // background mover (the store answers kPending meanwhile; the connection serves others), then
  // answers BUSY (a put) or a miss (a read).
  uint64_t mover_wait_ms = 2'000;
  // Threads that read blocks left on NVMe (nvme.promote_on_hit off) for the commands that send
  // them, so that no network thread waits for the disk (DiskReads).
  size_t disk_read_threads = 2;
  size_t max_clients = 10000;
  // Latency histograms of lookups, gets and puts (metrics::RequestLatency); metrics.histograms.
  bool latency_histograms = true;
  // Lapsed leases and reservations are taken back by the store's owner, which calls
  // Store::ExpireDeadlines periodically; the server only ends those of closed connections.
};

struct ServerStats {
  uint64_t connected_clients = 0;
  uint64_t total_connections = 0;  // accepted, rejected ones included
  uint64_t commands_processed = 0;
  uint64_t protocol_errors = 0;  // malformed frames (the connection was closed)
  // Large replies cut short because the value's lease lapsed while the client read it slowly
  // (the connection was closed rather than finish the reply with bytes that may have changed).
  uint64_t lapsed_reply_leases = 0;
  // Connections closed because the client took no piece of a large reply within
  // payload_send_timeout_ms (before the value's lease could lapse under the send).
  uint64_t stalled_reply_closes = 0;
  // SET values received straight into their arena slot (staged_value.h), not copied there.
  uint64_t staged_set_values = 0;
  uint64_t rejected_connections = 0;  // max_clients reached or uid not allowed
  uint64_t failed_accepts = 0;  // accept failed (EMFILE: out of descriptors); retried after a pause
};

class Server {
 public:
  // Validates the options (kInvalidArgument naming the bad key: no listener, a non-loopback
  // tcp_host without a password, a zero limit, ...) and registers the generic namespace in the
  // store. Binds nothing yet. The store's GPU tier, when it has one, is shared with Unix-socket
  // clients that ask for it (KVT.GPUATTACH), whose KVT.ACQUIRE then leases blocks in it too;
  // without one KVT.GPUATTACH answers NOTFOUND with options.gpu_tier_note and GPU blocks are read
  // inline. Errors of the host arena's export (options.shared_memory) are returned.
  static Result<std::unique_ptr<Server>> Create(const ServerOptions& options, store::Store& store);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens on the configured addresses, then starts the I/O threads. Errors name the
  // address: kDeviceError or kPermissionDenied from bind/listen ("unix socket /run/kvtier.sock:
  // bind: Address already in use"), kInvalidArgument for a path that is not a stale socket.
  // Call once.
  Status Start();

  // Tells the clients that map the GPU pool (KVT.GPUATTACH) that the daemon is stopping, and
  // waits until each has let go (sent KVT.GPUDETACH or closed its connection) or `timeout` has
  // passed. From this call on, KVT.GPUATTACH is refused and every command of an attached
  // connection but KVT.GPUDETACH and QUIT answers -SHUTDOWN; the rest is served as before. A
  // client only learns this from the reply to its next command, so the wait is bounded. Returns
  // the clients still attached (0: the pool may be freed under nobody). Call before Stop, from
  // the owner's thread.
  size_t DrainGpuImporters(std::chrono::milliseconds timeout);
  // Clients that hold the GPU pool mapped now.
  size_t gpu_importers() const;

  // Stops accepting, closes every connection (their reservations are aborted and their leases
  // released), joins the I/O threads and removes the Unix socket file. Idempotent.
  void Stop();

  // The generic key space's names and expiry times across a clean restart (generic_keys_file.h):
  // LoadKeyNames before Start (the file is removed once read), SaveKeyNames after Stop. Return
  // the entries read or written; errors as LoadGenericKeys / SaveGenericKeys.
  Result<size_t> LoadKeyNames(const std::string& path);
  Result<size_t> SaveKeyNames(const std::string& path);

  // The bound TCP port (the kernel's choice for tcp_ephemeral); 0 when TCP is off or not started.
  uint16_t tcp_port() const;
  const std::string& unix_path() const;
  ServerStats Stats() const;
  // The process section of /stats, /metrics and KVT.STATS: the one place it is assembled.
  metrics::ProcessInfo ProcessInfo() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::server
