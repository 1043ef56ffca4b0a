#include "daemon/index/lru_policy.h"

namespace kvtier::index {

void LruPolicy::Insert(const BlockKey& key) {
  order_.push_front(key);
  auto [it, inserted] = positions_.try_emplace(key, order_.begin());
  if (!inserted) {
    // Inserting a tracked key breaks the caller's contract; keep one node so size() stays exact.
    order_.erase(it->second);
    it->second = order_.begin();
  }
}

void LruPolicy::Touch(const BlockKey& key) {
  auto it = positions_.find(key);
  if (it == positions_.end()) return;
  order_.splice(order_.begin(), order_, it->second);
}

void LruPolicy::Erase(const BlockKey& key) {
  auto it = positions_.find(key);
  if (it == positions_.end()) return;
  order_.erase(it->second);
  positions_.erase(it);
}

std::optional<BlockKey> LruPolicy::PopVictim() {
  if (order_.empty()) return std::nullopt;
  BlockKey victim = order_.back();
  order_.pop_back();
  positions_.erase(victim);
  return victim;
}

}  // namespace kvtier::index
