#include "daemon/index/s3fifo_policy.h"

#include <algorithm>

namespace kvtier::index {

S3FifoPolicy::S3FifoPolicy(size_t capacity_hint_blocks)
    : capacity_hint_blocks_(capacity_hint_blocks) {}

size_t S3FifoPolicy::Capacity() const {
  return std::max<size_t>(1, capacity_hint_blocks_ > 0 ? capacity_hint_blocks_ : largest_size_);
}

// 10% of the capacity, at least one block.
size_t S3FifoPolicy::SmallCapacity() const { return std::max<size_t>(1, Capacity() / 10); }

bool S3FifoPolicy::Contains(const BlockKey& key) const {
  const Lists::Node node = lists_.Find(key);
  return node != Lists::kNone && lists_.SegmentOf(node) != kGhost;
}

void S3FifoPolicy::Insert(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (node == Lists::kNone) {
    lists_.Add(key, kSmall);
  } else if (lists_.SegmentOf(node) == kGhost) {
    // Evicted from S unused, and wanted again: it has proved itself, so M.
    lists_.MoveToHead(node, kMain);
    lists_.SetCounter(node, 0);
  } else {
    // Inserting a tracked key breaks the caller's contract; count it as a use.
    Touch(key);
    return;
  }
  largest_size_ = std::max(largest_size_, size());
}

void S3FifoPolicy::PutBack(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (node == Lists::kNone) {
    // A victim of M leaves no ghost (nor does one of S whose ghost was trimmed since: rare, and
    // M is then the safer place for a block that is in use).
    lists_.Add(key, kMain);
  } else if (lists_.SegmentOf(node) == kGhost) {
    lists_.MoveToHead(node, kSmall);  // a victim of S, which made it a ghost
    lists_.SetCounter(node, 0);
  } else {
    return;
  }
  largest_size_ = std::max(largest_size_, size());
}

void S3FifoPolicy::Touch(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (node == Lists::kNone || lists_.SegmentOf(node) == kGhost) return;
  lists_.SetCounter(node, std::min<uint8_t>(kMaxCount, lists_.Counter(node) + 1));
}

void S3FifoPolicy::Erase(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  // Removed, not evicted: no ghost, since a later put of the key says nothing about its use.
  if (node != Lists::kNone && lists_.SegmentOf(node) != kGhost) lists_.Remove(node);
}

std::optional<BlockKey> S3FifoPolicy::PopVictim() {
  if (size() == 0) return std::nullopt;
  while (true) {
    if (lists_.Size(kSmall) >= SmallCapacity() || lists_.Size(kMain) == 0) {
      const Lists::Node oldest = lists_.Tail(kSmall);
      if (lists_.Counter(oldest) > 0) {
        lists_.MoveToHead(oldest, kMain);  // used while in S: into M, its count cleared
        lists_.SetCounter(oldest, 0);
        continue;
      }
      BlockKey key = lists_.KeyOf(oldest);
      lists_.MoveToHead(oldest, kGhost);
      // G holds as many keys as M may.
      while (lists_.Size(kGhost) > Capacity() - std::min(Capacity(), SmallCapacity())) {
        lists_.Remove(lists_.Tail(kGhost));
      }
      return key;
    }
    const Lists::Node oldest = lists_.Tail(kMain);
    if (const uint8_t count = lists_.Counter(oldest); count > 0) {
      lists_.SetCounter(oldest, count - 1);
      lists_.MoveToHead(oldest, kMain);
      continue;
    }
    BlockKey key = lists_.KeyOf(oldest);
    lists_.Remove(oldest);
    return key;
  }
}

}  // namespace kvtier::index
