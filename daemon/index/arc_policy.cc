#include "daemon/index/arc_policy.h"

#include <algorithm>

namespace kvtier::index {

ArcPolicy::ArcPolicy(size_t capacity_hint_blocks) : capacity_hint_blocks_(capacity_hint_blocks) {}

size_t ArcPolicy::Capacity() const {
  return std::max<size_t>(1, capacity_hint_blocks_ > 0 ? capacity_hint_blocks_ : largest_size_);
}

size_t ArcPolicy::size() const { return lists_[kRecent].size() + lists_[kFrequent].size(); }

size_t ArcPolicy::ghost_size() const {
  return lists_[kRecentGhost].size() + lists_[kFrequentGhost].size();
}

bool ArcPolicy::Contains(const BlockKey& key) const {
  auto it = positions_.find(key);
  return it != positions_.end() && (it->second.list == kRecent || it->second.list == kFrequent);
}

void ArcPolicy::MoveToFront(Position& position, ListId to) {
  lists_[to].splice(lists_[to].begin(), lists_[position.list], position.it);
  position.list = to;
}

void ArcPolicy::AdaptOnGhostHit(ListId ghost) {
  // The paper's step: one block, or the ratio of the other ghost list to this one when that is
  // larger, so the rarer signal moves the target faster.
  const size_t here = std::max<size_t>(1, lists_[ghost].size());
  const size_t other = lists_[ghost == kRecentGhost ? kFrequentGhost : kRecentGhost].size();
  const double step = static_cast<double>(std::max<size_t>(1, other / here)) / Capacity();
  recent_target_share_ = ghost == kRecentGhost ? std::min(1.0, recent_target_share_ + step)
                                               : std::max(0.0, recent_target_share_ - step);
}

void ArcPolicy::TrimGhost(ListId ghost) {
  while (lists_[ghost].size() > Capacity()) {
    positions_.erase(lists_[ghost].back());
    lists_[ghost].pop_back();
  }
}

void ArcPolicy::Insert(const BlockKey& key) {
  const bool restoring = last_victim_ == key;
  last_victim_.reset();
  auto it = positions_.find(key);
  if (it == positions_.end()) {
    lists_[kRecent].push_front(key);
    positions_.emplace(key, Position{kRecent, lists_[kRecent].begin()});
  } else if (it->second.list == kRecentGhost || it->second.list == kFrequentGhost) {
    const ListId ghost = it->second.list;
    if (restoring) {
      // Back into the resident list PopVictim took it from, as just used: at the least recent
      // end it would be the next victim again, and PickVictim, which asks again after putting a
      // leased block back, would see no other block.
      MoveToFront(it->second, ghost == kRecentGhost ? kRecent : kFrequent);
    } else {
      AdaptOnGhostHit(ghost);
      MoveToFront(it->second, kFrequent);
    }
  } else {
    // Inserting a tracked key breaks the caller's contract; count it as a use.
    MoveToFront(it->second, kFrequent);
  }
  largest_size_ = std::max(largest_size_, size());
}

void ArcPolicy::Touch(const BlockKey& key) {
  auto it = positions_.find(key);
  if (it == positions_.end()) return;
  if (it->second.list == kRecent || it->second.list == kFrequent) {
    MoveToFront(it->second, kFrequent);
  }
}

void ArcPolicy::Erase(const BlockKey& key) {
  auto it = positions_.find(key);
  if (it == positions_.end() || !(it->second.list == kRecent || it->second.list == kFrequent)) {
    return;
  }
  // Removed, not evicted: no ghost, since a later put of the key says nothing about the split.
  lists_[it->second.list].erase(it->second.it);
  positions_.erase(it);
}

std::optional<BlockKey> ArcPolicy::PopVictim() {
  if (size() == 0) return std::nullopt;
  const std::list<BlockKey>& recent = lists_[kRecent];
  const bool from_recent =
      !recent.empty() && (static_cast<double>(recent.size()) >
                              recent_target_share_ * static_cast<double>(Capacity()) ||
                          lists_[kFrequent].empty());
  const ListId from = from_recent ? kRecent : kFrequent;
  const ListId ghost = from_recent ? kRecentGhost : kFrequentGhost;
  BlockKey victim = lists_[from].back();
  MoveToFront(positions_.find(victim)->second, ghost);
  TrimGhost(ghost);
  last_victim_ = victim;
  return victim;
}

}  // namespace kvtier::index
