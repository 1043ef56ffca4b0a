#include "daemon/placement/promotion_queue.h"

#include <algorithm>

namespace kvtier::placement {

PromotionQueue::PromotionQueue(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

PromotionQueue::PushOutcome PromotionQueue::Push(const PromotionCandidate& candidate) {
  MutexLock lock(mu_);
  if (auto it = queued_.find(candidate.key); it != queued_.end()) {
    // A fresh read's candidate is the newest incarnation; a mover's retry (retries > 0) may carry
    // an older one than a read queued since it was taken.
    if (candidate.retries == 0) it->second = candidate.generation;
    return PushOutcome::kAlreadyQueued;
  }
  if (queue_.size() >= capacity_) return PushOutcome::kFull;
  queued_.emplace(candidate.key, candidate.generation);
  queue_.push_back(candidate);
  return PushOutcome::kQueued;
}

void PromotionQueue::PopBatch(size_t max, std::vector<PromotionCandidate>& out) {
  out.clear();
  MutexLock lock(mu_);
  while (out.size() < max && !queue_.empty()) {
    auto it = queued_.find(queue_.front().key);
    out.push_back(queue_.front());
    out.back().generation = it->second;
    queued_.erase(it);
    queue_.pop_front();
  }
}

size_t PromotionQueue::size() const {
  MutexLock lock(mu_);
  return queue_.size();
}

}  // namespace kvtier::placement
