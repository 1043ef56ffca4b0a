#include "daemon/store/move_requests.h"

#include <algorithm>

namespace kvtier::store {

void MoveRequests::AskForRoom(uint64_t bytes) {
  MutexLock lock(mu_);
  room_bytes_ = std::max(room_bytes_, bytes);
}

uint64_t MoveRequests::TakeRoomRequest() {
  MutexLock lock(mu_);
  const uint64_t bytes = room_bytes_;
  room_bytes_ = 0;
  return bytes;
}

bool MoveRequests::AskForFetch(const BlockKey& key) {
  MutexLock lock(mu_);
  if (!queued_.insert(key).second) return false;
  fetches_.push_back(key);
  return true;
}

std::optional<BlockKey> MoveRequests::TakeFetch() {
  MutexLock lock(mu_);
  if (fetches_.empty()) return std::nullopt;
  const BlockKey key = fetches_.front();
  fetches_.pop_front();
  return key;
}

bool MoveRequests::AskForRemoteFetch(const NamespaceId& ns, const BlockKey& key) {
  MutexLock lock(mu_);
  if (!queued_.insert(key).second) return false;
  remote_fetches_.emplace_back(ns, key);
  return true;
}

std::optional<std::pair<NamespaceId, BlockKey>> MoveRequests::TakeRemoteFetch() {
  MutexLock lock(mu_);
  if (remote_fetches_.empty()) return std::nullopt;
  const std::pair<NamespaceId, BlockKey> fetch = remote_fetches_.front();
  remote_fetches_.pop_front();
  return fetch;
}

void MoveRequests::FinishFetch(const BlockKey& key, bool moved) {
  {
    MutexLock lock(mu_);
    queued_.erase(key);
    if (!moved) {
      if (failed_.size() >= kMaxRememberedFailures) failed_.clear();
      failed_.insert(key);
    }
  }
  // A failed fetch is news too: the reader now leases the block where it lies.
  NotifyMoved();
}

bool MoveRequests::TakeFailedFetch(const BlockKey& key) {
  MutexLock lock(mu_);
  return failed_.erase(key) > 0;
}

bool MoveRequests::HasWork() const {
  MutexLock lock(mu_);
  return room_bytes_ != 0 || !fetches_.empty() || !remote_fetches_.empty();
}

void MoveRequests::SetMoveListener(std::function<void()> listener) {
  auto shared =
      listener ? std::make_shared<const std::function<void()>>(std::move(listener)) : nullptr;
  MutexLock lock(listener_mu_);
  listener_ = std::move(shared);
}

void MoveRequests::NotifyMoved() {
  std::shared_ptr<const std::function<void()>> listener;
  {
    MutexLock lock(listener_mu_);
    listener = listener_;
  }
  if (listener) (*listener)();
}

}  // namespace kvtier::store
