#include "daemon/index/arc_policy.h"

#include <algorithm>

namespace kvtier::index {

ArcPolicy::ArcPolicy(size_t capacity_hint_blocks) : capacity_hint_blocks_(capacity_hint_blocks) {}

size_t ArcPolicy::Capacity() const {
  return std::max<size_t>(1, capacity_hint_blocks_ > 0 ? capacity_hint_blocks_ : largest_size_);
}

size_t ArcPolicy::size() const { return lists_.Size(kRecent) + lists_.Size(kFrequent); }

size_t ArcPolicy::ghost_size() const {
  return lists_.Size(kRecentGhost) + lists_.Size(kFrequentGhost);
}

bool ArcPolicy::Contains(const BlockKey& key) const { return Resident(lists_.Find(key)); }

void ArcPolicy::AdaptOnGhostHit(ListId ghost) {
  // The paper's step: one block, or the ratio of the other ghost list to this one when that is
  // larger, so the rarer signal moves the target faster.
  const size_t here = std::max<size_t>(1, lists_.Size(ghost));
  const size_t other = lists_.Size(ghost == kRecentGhost ? kFrequentGhost : kRecentGhost);
  const double step = static_cast<double>(std::max<size_t>(1, other / here)) / Capacity();
  recent_target_share_ = ghost == kRecentGhost ? std::min(1.0, recent_target_share_ + step)
                                               : std::max(0.0, recent_target_share_ - step);
}

void ArcPolicy::TrimGhost(ListId ghost) {
  while (lists_.Size(ghost) > Capacity()) lists_.Remove(lists_.Tail(ghost));
}

void ArcPolicy::Insert(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (node == Lists::kNone) {
    lists_.Add(key, kRecent);
  } else if (!Resident(node)) {
    AdaptOnGhostHit(static_cast<ListId>(lists_.SegmentOf(node)));
    lists_.MoveToHead(node, kFrequent);
  } else {
    // Inserting a tracked key breaks the caller's contract; count it as a use.
    lists_.MoveToHead(node, kFrequent);
  }
  largest_size_ = std::max(largest_size_, size());
}

void ArcPolicy::PutBack(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (Resident(node)) return;
  if (node == Lists::kNone) {
    lists_.Add(key, kRecent);  // its ghost was trimmed meanwhile: the list new blocks enter
  } else {
    // Back into the resident list PopVictim took it from, as just used: at the least recent end
    // it would be the next victim again.
    const auto ghost = static_cast<ListId>(lists_.SegmentOf(node));
    lists_.MoveToHead(node, ghost == kRecentGhost ? kRecent : kFrequent);
  }
  largest_size_ = std::max(largest_size_, size());
}

void ArcPolicy::Touch(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (Resident(node)) lists_.MoveToHead(node, kFrequent);
}

void ArcPolicy::Erase(const BlockKey& key) {
  // Removed, not evicted: no ghost, since a later put of the key says nothing about the split.
  const Lists::Node node = lists_.Find(key);
  if (Resident(node)) lists_.Remove(node);
}

std::optional<BlockKey> ArcPolicy::PopVictim() {
  if (size() == 0) return std::nullopt;
  const size_t recent = lists_.Size(kRecent);
  const bool from_recent =
      recent > 0 &&
      (static_cast<double>(recent) > recent_target_share_ * static_cast<double>(Capacity()) ||
       lists_.Size(kFrequent) == 0);
  const ListId from = from_recent ? kRecent : kFrequent;
  const ListId ghost = from_recent ? kRecentGhost : kFrequentGhost;
  const Lists::Node node = lists_.Tail(from);
  const BlockKey victim = lists_.KeyOf(node);
  lists_.MoveToHead(node, ghost);
  TrimGhost(ghost);
  return victim;
}

}  // namespace kvtier::index
