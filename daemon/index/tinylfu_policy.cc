#include "daemon/index/tinylfu_policy.h"

#include <algorithm>

namespace kvtier::index {

TinyLfuPolicy::TinyLfuPolicy(size_t capacity_hint_blocks)
    : capacity_hint_blocks_(capacity_hint_blocks) {}

size_t TinyLfuPolicy::Capacity() const {
  return std::max<size_t>(1, capacity_hint_blocks_ > 0 ? capacity_hint_blocks_ : largest_size_);
}

// 1% of the capacity, at least one block (so a capacity of one block has no main cache).
size_t TinyLfuPolicy::WindowCapacity() const {
  return std::clamp<size_t>(Capacity() / 100, 1, Capacity());
}

// The sketch is sized on the first insert, not at construction: an index builds a policy for
// every tier, most of which a deployment leaves empty. Without a hint it then follows the largest
// size seen, rebuilt when that doubles so that the counts keep their meaning (a sketch far
// smaller than the cache saturates). Rebuilding forgets the counts; with sizes doubling, that
// happens a logarithmic number of times.
void TinyLfuPolicy::MaybeGrowSketch() {
  const size_t wanted = capacity_hint_blocks_ > 0 ? capacity_hint_blocks_ : largest_size_;
  if (!sketch_ || wanted > 2 * sketch_->capacity_blocks()) sketch_.emplace(wanted);
}

void TinyLfuPolicy::Insert(const BlockKey& key) {
  if (lists_.Find(key) != Lists::kNone) {
    // Inserting a tracked key breaks the caller's contract; count it as a use.
    Touch(key);
    return;
  }
  Track(key);
  sketch_->Increment(key);
}

void TinyLfuPolicy::PutBack(const BlockKey& key) {
  if (lists_.Find(key) == Lists::kNone) Track(key);
}

void TinyLfuPolicy::Track(const BlockKey& key) {
  lists_.Add(key, kWindow);
  ++size_;
  largest_size_ = std::max(largest_size_, size_);
  MaybeGrowSketch();
}

void TinyLfuPolicy::Touch(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (node == Lists::kNone) return;
  sketch_->Increment(key);
  if (lists_.SegmentOf(node) == kWindow) {
    lists_.MoveToHead(node, kWindow);
    return;
  }
  // A use in the main cache earns (or keeps) the protected part; its overflow goes back to the
  // head of probation.
  lists_.MoveToHead(node, kProtected);
  while (lists_.Size(kProtected) > ProtectedCapacity()) {
    lists_.MoveToHead(lists_.Tail(kProtected), kProbation);
  }
}

void TinyLfuPolicy::Erase(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (node == Lists::kNone) return;
  lists_.Remove(node);
  --size_;
}

std::optional<BlockKey> TinyLfuPolicy::PopVictim() {
  if (size_ == 0) return std::nullopt;
  // The window's overflow enters the main cache freely while the main cache has room.
  while (lists_.Size(kWindow) > WindowCapacity() &&
         lists_.Size(kProbation) + lists_.Size(kProtected) < MainCapacity()) {
    lists_.MoveToHead(lists_.Tail(kWindow), kProbation);
  }
  const Lists::Node main_victim =
      lists_.Tail(kProbation) != Lists::kNone ? lists_.Tail(kProbation) : lists_.Tail(kProtected);
  Lists::Node victim = main_victim;
  if (lists_.Size(kWindow) > WindowCapacity() || main_victim == Lists::kNone) {
    // The admission decision: the window's oldest block against the main cache's victim; the
    // newcomer must be strictly more frequent to get in.
    const Lists::Node candidate = lists_.Tail(kWindow);
    victim = candidate;
    if (main_victim != Lists::kNone && sketch_->Frequency(lists_.KeyOf(candidate)) >
                                           sketch_->Frequency(lists_.KeyOf(main_victim))) {
      lists_.MoveToHead(candidate, kProbation);
      victim = main_victim;
    }
  }
  BlockKey key = lists_.KeyOf(victim);
  lists_.Remove(victim);
  --size_;
  return key;
}

}  // namespace kvtier::index
