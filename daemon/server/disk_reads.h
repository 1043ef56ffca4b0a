// DiskReads: reads of leased blocks whose tier has no address (NVMe, when nvme.promote_on_hit is
// off and a read leaves the block where it is), made on threads of their own so that no network
// thread waits for a disk.
//
// A command that meets such a block starts its read (Start) and answers kPending; the connection
// waits without blocking its thread (Progress::kRetryLater) and is woken through MoverWaiters when
// the read ends; called again, the command takes the bytes (DiskRead::Take) and releases the lease
// as for any read. A command that ends without taking them (its wait ran out, the client went
// away) drops its DiskRead: the lease is released then, or by the reading thread once the read
// ends, never while the read may still fill the buffer.
//
// Thread safety: Start from any thread; a DiskRead is used by one command at a time.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "common/keys.h"
#include "common/status.h"
#include "daemon/server/mover_waiters.h"
#include "daemon/store/store.h"

namespace kvtier::server {

class DiskReads;

class DiskRead {
 public:
  DiskRead() = default;
  DiskRead(DiskRead&&) noexcept = default;
  DiskRead& operator=(DiskRead&& other) noexcept;
  ~DiskRead();  // abandons a read not taken

  // Whether this is the read of `key`'s block for the current command.
  bool Reads(const BlockKey& key) const;
  const store::Lease& lease() const;
  bool done() const;
  // The block's bytes once done (the status of the read: kChecksumMismatch for bytes that fail
  // verification, as Store::ReadLeased); the lease is the caller's to release from now on.
  Status Take(std::vector<std::byte>& bytes);

 private:
  friend class DiskReads;
  struct State;
  explicit DiskRead(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void Abandon();

  std::shared_ptr<State> state_;
};

class DiskReads {
 public:
  DiskReads(store::Store& store, size_t threads, std::shared_ptr<MoverWaiters> waiters);
  ~DiskReads();  // waits for the reads in flight
  DiskReads(const DiskReads&) = delete;
  DiskReads& operator=(const DiskReads&) = delete;

  // Reads `lease`'s block on a disk-read thread; the lease stays the caller's (see DiskRead).
  DiskRead Start(const store::Lease& lease);

 private:
  store::Store& store_;
  std::shared_ptr<MoverWaiters> waiters_;
  boost::asio::thread_pool pool_;
};

}  // namespace kvtier::server
