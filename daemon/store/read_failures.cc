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
  if (it != failed_.end()) {
    it->second = {offset, now_us};  // another copy of the key: its first failure
    return false;
  }
  failed_.emplace(key, FirstFailure{offset, now_us});
  order_.push_back(key);
  while (order_.size() > kMaxRemembered) {
    failed_.erase(order_.front());
    order_.pop_front();
  }
  remembered_.store(failed_.size(), std::memory_order_relaxed);
  return false;
}

void ReadFailures::Succeeded(const BlockKey& key) {
  if (remembered_.load(std::memory_order_relaxed) == 0) return;
  MutexLock lock(mu_);
  if (failed_.erase(key) > 0) remembered_.store(failed_.size(), std::memory_order_relaxed);
}

}  // namespace kvtier::store
