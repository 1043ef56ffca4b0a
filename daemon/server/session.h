// Session: the state of one client connection that commands read and change: protocol version,
// authentication, name, whether it mapped the GPU pool, and the reservations and leases the
// client holds in the store.
//
// The session owns those reservations and leases on the client's behalf: the store's ids are
// global, so a client may only commit, abort or release ids recorded here (another client's ids
// answer NOTFOUND), and ~Session (or EndAll) aborts and releases whatever is left, so a client that
// vanishes mid-put or mid-get leaves no half-written block and no leased block behind.
//
// One session belongs to one connection and is only touched from that connection's strand; it is
// not thread-safe. The store must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/resp/protocol.h"
#include "daemon/server/gpu_importers.h"

namespace kvtier::store {
class Store;
}

namespace kvtier::server {

enum class Transport : uint8_t { kUnix, kTcp };

class Session {
 public:
  Session(store::Store& store, uint64_t id, Transport transport, bool authenticated)
      : store_(store), id_(id), transport_(transport), authenticated_(authenticated) {}
  ~Session() { EndAll(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  uint64_t id() const { return id_; }
  Transport transport() const { return transport_; }
  resp::Protocol protocol() const { return protocol_; }
  void set_protocol(resp::Protocol protocol) { protocol_ = protocol; }
  bool authenticated() const { return authenticated_; }
  void set_authenticated() { authenticated_ = true; }
  // An admin may change what every tenant gets (KVT.QUOTA): a peer on the Unix socket that runs
  // as root or as the daemon's own user, who could change the config file and restart it anyway.
  // Never a TCP client: one password is shared by every client that has it.
  bool admin() const { return admin_; }
  void set_admin() { admin_ = true; }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // Set by KVT.GPUATTACH: the client has the GPU pool's export, so KVT.ACQUIRE may lease blocks
  // in it (their offsets mean nothing to a client that has not mapped the pool), and the pool is
  // not freed at shutdown before it lets go (bounded: GpuImporters). Unset by KVT.GPUDETACH, for
  // a client that could not map the export after all or has closed its import, and when the
  // session ends.
  bool gpu_pool_attached() const { return gpu_pool_hold_.held(); }
  void AttachGpuPool(GpuImporters& importers) {
    if (!gpu_pool_hold_.held()) gpu_pool_hold_ = importers.Add();
  }
  void DetachGpuPool() { gpu_pool_hold_.Reset(); }
  // Set by KVT.ATTACH: the client moves block bytes through the arena (the shared-memory path),
  // so its KVT.LOOKUPs are timed as that path's (metrics::RequestLatency).
  bool arena_attached() const { return arena_attached_; }
  void set_arena_attached() { arena_attached_ = true; }

  // `client_writes`: the client copies into the slot itself (KVT.RESERVE), so it may still be
  // writing when the connection ends; the daemon's own (a SET value received into its slot) stop
  // with the connection.
  void AddReservation(uint64_t id, bool client_writes) { reservations_[id] = client_writes; }
  // Forgets `id` and returns true when this session holds it; false for anyone else's id.
  bool TakeReservation(uint64_t id) { return reservations_.erase(id) == 1; }
  void AddLease(uint64_t id) { leases_.insert(id); }
  bool TakeLease(uint64_t id) { return leases_.erase(id) == 1; }
  size_t reservations_held() const { return reservations_.size(); }
  size_t leases_held() const { return leases_.size(); }

  // Frees the tables' buckets when they are empty: a client that once held a million ids should
  // not keep megabytes while idle.
  void ShrinkIfEmpty();

  // Aborts every reservation and releases every lease still held. A reservation the client writes
  // is abandoned instead (Store::AbandonPut): its slot stays quarantined, since the connection
  // may have ended (the daemon's idle timeout, a protocol error) while the client still copies
  // into it. Ids the store has already expired answer NOTFOUND there, which is fine: they are
  // gone either way.
  void EndAll();

 private:
  store::Store& store_;
  const uint64_t id_;
  const Transport transport_;
  resp::Protocol protocol_ = resp::Protocol::kResp2;
  bool authenticated_;
  bool arena_attached_ = false;
  bool admin_ = false;
  GpuImporters::Hold gpu_pool_hold_;
  std::string name_;
  std::unordered_map<uint64_t, bool> reservations_;  // id -> the client writes it (KVT.RESERVE)
  std::unordered_set<uint64_t> leases_;
};

}  // namespace kvtier::server
