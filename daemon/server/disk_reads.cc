#include "daemon/server/disk_reads.h"

#include <atomic>
#include <boost/asio/post.hpp>
#include <utility>

#include "common/thread_annotations.h"

namespace kvtier::server {

struct DiskRead::State {
  // A constructor, not aggregate initialisation through make_shared: clang 14 (the sanitizer
  // builds) does not take parenthesised aggregate initialisation.
  State(store::Store& s, const store::Lease& l) : store(s), lease(l) {}
  store::Store& store;
  store::Lease lease;
  std::vector<std::byte> bytes;
  Status status;
  std::atomic<bool> done{false};
  Mutex mu;
  // The command let go before the read ended: the reading thread releases the lease.
  bool abandoned GUARDED_BY(mu) = false;
  bool finished GUARDED_BY(mu) = false;
};

DiskRead& DiskRead::operator=(DiskRead&& other) noexcept {
  if (this != &other) {
    Abandon();
    state_ = std::move(other.state_);
  }
  return *this;
}

DiskRead::~DiskRead() { Abandon(); }

bool DiskRead::Reads(const BlockKey& key) const { return state_ && state_->lease.key == key; }

const store::Lease& DiskRead::lease() const { return state_->lease; }

bool DiskRead::done() const { return state_ && state_->done.load(std::memory_order_acquire); }

Status DiskRead::Take(std::vector<std::byte>& bytes) {
  bytes = std::move(state_->bytes);
  Status st = std::move(state_->status);
  state_.reset();
  return st;
}

void DiskRead::Abandon() {
  if (!state_) return;
  bool release_now = false;
  {
    MutexLock lock(state_->mu);
    release_now = state_->finished;
    state_->abandoned = !release_now;
  }
  if (release_now) (void)state_->store.Release(state_->lease.id);
  state_.reset();
}

DiskReads::DiskReads(store::Store& store, size_t threads, std::shared_ptr<MoverWaiters> waiters)
    : store_(store), waiters_(std::move(waiters)), pool_(threads) {}

DiskReads::~DiskReads() { pool_.join(); }

DiskRead DiskReads::Start(const store::Lease& lease) {
  auto state = std::make_shared<DiskRead::State>(store_, lease);
  boost::asio::post(pool_, [state, waiters = waiters_] {
    state->bytes.resize(state->lease.extent.length);
    state->status = state->store.ReadLeased(state->lease, state->bytes);
    bool release = false;
    {
      MutexLock lock(state->mu);
      state->finished = true;
      release = state->abandoned;
    }
    if (release) (void)state->store.Release(state->lease.id);
    state->done.store(true, std::memory_order_release);
    waiters->Notify();  // the command waits for the mover's signal
  });
  return DiskRead(std::move(state));
}

}  // namespace kvtier::server
