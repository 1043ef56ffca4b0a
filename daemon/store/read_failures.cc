#include "daemon/store/read_failures.h"

namespace kvtier::store {

bool ReadFailures::FailedAgain(const BlockKey& key, uint64_t offset) {
  MutexLock lock(mu_);
  auto it = failed_.find(key);
  if (it != failed_.end() && it->second == offset) {
    failed_.erase(it);  // its place in order_ goes when it reaches the front
    return true;
  }
  if (it != failed_.end()) {
    it->second = offset;  // another copy of the key: its first failure
    return false;
  }
  failed_.emplace(key, offset);
  order_.push_back(key);
  while (order_.size() > kMaxRemembered) {
    failed_.erase(order_.front());
    order_.pop_front();
  }
  return false;
}

}  // namespace kvtier::store
