#include "daemon/server/mover_waiters.h"

#include <algorithm>

namespace kvtier::server {

bool MoverWaiters::Register(uint64_t seen,
                            const std::shared_ptr<boost::asio::steady_timer>& timer) {
  MutexLock lock(mu_);
  if (shut_down_ || generation_.load(std::memory_order_relaxed) != seen) return false;
  if (timers_.size() >= kSweepAt) {
    std::erase_if(timers_,
                  [](const std::weak_ptr<boost::asio::steady_timer>& t) { return t.expired(); });
  }
  timers_.push_back(timer);
  return true;
}

void MoverWaiters::Notify() {
  MutexLock lock(mu_);
  if (shut_down_) return;
  // Under the lock, so that a Register either sees the new generation or is in the list taken.
  generation_.fetch_add(1, std::memory_order_release);
  for (const std::weak_ptr<boost::asio::steady_timer>& weak : timers_) {
    std::shared_ptr<boost::asio::steady_timer> timer = weak.lock();
    // A timer is used only on its connection's strand: the cancel is posted there.
    if (timer) boost::asio::post(timer->get_executor(), [timer] { timer->cancel(); });
  }
  timers_.clear();
}

void MoverWaiters::Shutdown() {
  MutexLock lock(mu_);
  shut_down_ = true;
  timers_.clear();
}

}  // namespace kvtier::server
