#include "daemon/store/read_failures.h"

namespace kvtier::store {

bool ReadFailures::FailedAgain(const BlockKey& key, uint64_t offset, uint64_t now_us) {
  MutexLock lock(mu_);
  auto it = failed_.find(key);
  if (it != failed_.end() && it->second.offset == offset) {
    if (now_us - it->second.at_us < kMinGapUs) return false;  // maybe a passing fault still
    failed_.erase(it);  // its place in order_ goes when it reaches the front
    remembered_.store(failed_.size(), std::memory_order_relaxed);
    return true;
  }
  // A first failure, or one of another copy of the key (which starts afresh).
  Remember(key, offset, now_us);
  return false;
}

void ReadFailures::Remember(const BlockKey& key, uint64_t offset, uint64_t now_us) {
  const uint64_t serial = next_serial_++;
  failed_[key] = FirstFailure{offset, now_us, serial};
  order_.push_back({key, serial});
  while (order_.size() > kMaxRemembered) {
    const Remembered& oldest = order_.front();
    auto it = failed_.find(oldest.key);
    if (it != failed_.end() && it->second.serial == oldest.serial) failed_.erase(it);
    order_.pop_front();
  }
  remembered_.store(failed_.size(), std::memory_order_relaxed);
}

void ReadFailures::Succeeded(const BlockKey& key) {
  if (remembered_.load(std::memory_order_relaxed) == 0) return;
  MutexLock lock(mu_);
  if (failed_.erase(key) > 0) remembered_.store(failed_.size(), std::memory_order_relaxed);
}

}  // namespace kvtier::store
