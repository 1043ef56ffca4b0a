// MoverWaiters: the connections whose command waits for the tier mover (a put waiting for room in
// the host tier, a read waiting for a block to come up from NVMe), so that the mover's progress
// wakes them at once instead of at their next look.
//
// Such a command sleeps on a timer of its connection's strand with a fallback expiry; Notify
// (called on a mover thread through Store::SetMoveListener) cancels every registered timer, on its
// own strand. A command reads Generation() before it asks the store, and registers with that
// value: a Notify in between refuses the registration, so a move that ended while the command was
// asking is never missed.
//
// Thread safety: every method may be called from any thread. After Shutdown, Notify does nothing
// and Register refuses: the server calls it before it stops its threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/thread_annotations.h"
#include "daemon/server/asio.h"

namespace kvtier::server {

class MoverWaiters {
 public:
  uint64_t Generation() const { return generation_.load(std::memory_order_acquire); }
  // Registers `timer` to be cancelled at the next Notify. false: a Notify came after `seen` was
  // read (or the server is stopping); do not wait, ask the store again.
  bool Register(uint64_t seen, const std::shared_ptr<boost::asio::steady_timer>& timer);
  void Notify();
  void Shutdown();

 private:
  // Registrations whose timer expired on its own stay until the next Notify; past this many they
  // are swept at Register, so a mover that stays idle does not let the list grow.
  static constexpr size_t kSweepAt = 1024;

  std::atomic<uint64_t> generation_{0};
  Mutex mu_;
  std::vector<std::weak_ptr<boost::asio::steady_timer>> timers_ GUARDED_BY(mu_);
  bool shut_down_ GUARDED_BY(mu_) = false;
};

}  // namespace kvtier::server
