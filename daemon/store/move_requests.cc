#include "daemon/store/move_requests.h"

#include <algorithm>

namespace kvtier::store {
namespace {

// The first `max` requests of a queue, oldest first, taken out of it.
template <typename Request>
std::vector<Request> TakeUpTo(std::deque<Request>& queue, size_t max) {
  const size_t n = std::min(max, queue.size());
  std::vector<Request> taken(queue.begin(), queue.begin() + static_cast<ptrdiff_t>(n));
  queue.erase(queue.begin(), queue.begin() + static_cast<ptrdiff_t>(n));
  return taken;
}

}  // namespace

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

std::vector<BlockKey> MoveRequests::TakeFetches(size_t max) {
  MutexLock lock(mu_);
  return TakeUpTo(fetches_, max);
}

bool MoveRequests::HasFetches() const {
  MutexLock lock(mu_);
  return !fetches_.empty();
}

MoveRequests::RemoteAsk MoveRequests::AskForRemoteFetch(const NamespaceId& ns,
                                                        const BlockKey& key) {
  MutexLock lock(mu_);
  if (queued_.contains(key)) return RemoteAsk::kAlreadyAsked;
  if (remote_fetches_.size() >= kMaxRemoteFetches) return RemoteAsk::kQueueFull;
  queued_.insert(key);
  remote_fetches_.push_back({ns, key, std::chrono::steady_clock::now()});
  return RemoteAsk::kQueued;
}

std::vector<std::pair<NamespaceId, BlockKey>> MoveRequests::TakeRemoteFetches(
    size_t max, std::chrono::steady_clock::time_point asked_since, uint64_t* expired) {
  std::vector<std::pair<NamespaceId, BlockKey>> taken;
  MutexLock lock(mu_);
  while (taken.size() < max && !remote_fetches_.empty()) {
    const RemoteFetch request = remote_fetches_.front();
    remote_fetches_.pop_front();
    if (request.asked_at >= asked_since) {
      taken.emplace_back(request.ns, request.key);
      continue;
    }
    queued_.erase(request.key);  // no failure is remembered: nobody waits for this one
    if (expired != nullptr) ++*expired;
  }
  return taken;
}

void MoveRequests::FinishFetch(const BlockKey& key, bool moved) {
  {
    MutexLock lock(mu_);
    queued_.erase(key);
    if (!moved) {
      if (failed_.size() >= kMaxRememberedFailures) failed_.clear();
      failed_.insert_or_assign(key, std::chrono::steady_clock::now());
    }
  }
  // A failed fetch is news too: the reader now answers a miss.
  NotifyMoved();
}

bool MoveRequests::TakeFailedFetch(const BlockKey& key,
                                   std::chrono::steady_clock::time_point failed_since) {
  MutexLock lock(mu_);
  const auto failed = failed_.find(key);
  if (failed == failed_.end()) return false;
  const bool recent = failed->second >= failed_since;
  failed_.erase(failed);
  return recent;
}

void MoveRequests::AskForWriteThrough(const BlockKey& key, uint64_t generation) {
  MutexLock lock(mu_);
  if (!pending_write_throughs_.insert(generation).second) return;
  write_throughs_.push_back({key, generation});
}

std::vector<WriteThroughRequest> MoveRequests::TakeWriteThroughs(size_t max) {
  MutexLock lock(mu_);
  return TakeUpTo(write_throughs_, max);
}

void MoveRequests::TrackWriteThrough(uint64_t generation) {
  MutexLock lock(mu_);
  pending_write_throughs_.insert(generation);
}

void MoveRequests::FinishWriteThrough(uint64_t generation, Status outcome) {
  MutexLock lock(mu_);
  pending_write_throughs_.erase(generation);
  if (abandoned_write_throughs_.erase(generation) > 0 || outcome.ok()) return;
  if (!failed_write_throughs_.insert_or_assign(generation, std::move(outcome)).second) return;
  failed_write_through_order_.push_back(generation);
  while (failed_write_through_order_.size() > kMaxRememberedWriteThroughFailures) {
    failed_write_throughs_.erase(failed_write_through_order_.front());
    failed_write_through_order_.pop_front();
  }
}

bool MoveRequests::WriteThroughPending(uint64_t generation) const {
  MutexLock lock(mu_);
  return pending_write_throughs_.contains(generation);
}

bool MoveRequests::WriteThroughTracked(uint64_t generation) const {
  MutexLock lock(mu_);
  return pending_write_throughs_.contains(generation) ||
         failed_write_throughs_.contains(generation);
}

std::optional<Status> MoveRequests::TakeWriteThroughOutcome(uint64_t generation) {
  MutexLock lock(mu_);
  if (pending_write_throughs_.contains(generation)) return std::nullopt;
  auto failed = failed_write_throughs_.find(generation);
  if (failed == failed_write_throughs_.end()) return Status::Ok();
  Status outcome = std::move(failed->second);
  failed_write_throughs_.erase(failed);
  // Its place in the order goes when it reaches the front (erase of a missing key is a no-op).
  return outcome;
}

void MoveRequests::ForgetWriteThrough(uint64_t generation) {
  MutexLock lock(mu_);
  if (pending_write_throughs_.contains(generation)) {
    abandoned_write_throughs_.insert(generation);
  } else {
    failed_write_throughs_.erase(generation);
  }
}

bool MoveRequests::AskForRemoteWriteThrough(const BlockKey& key, uint64_t generation) {
  MutexLock lock(mu_);
  if (remote_write_throughs_.size() >= kMaxRemoteWriteThroughs) return false;
  remote_write_throughs_.push_back({key, generation});
  return true;
}

std::vector<WriteThroughRequest> MoveRequests::TakeRemoteWriteThroughs(size_t max) {
  MutexLock lock(mu_);
  return TakeUpTo(remote_write_throughs_, max);
}

bool MoveRequests::HasWork() const {
  MutexLock lock(mu_);
  return room_bytes_ != 0 || !fetches_.empty() || !write_throughs_.empty() ||
         !remote_fetches_.empty() || !remote_write_throughs_.empty();
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
