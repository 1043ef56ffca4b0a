#include "daemon/index/lru_policy.h"

namespace kvtier::index {

void LruPolicy::Insert(const BlockKey& key) {
  // Inserting a tracked key breaks the caller's contract; keep one node so size() stays exact.
  if (const Lists::Node node = lists_.Find(key); node != Lists::kNone) {
    lists_.MoveToHead(node, kRecency);
    return;
  }
  lists_.Add(key, kRecency);
}

void LruPolicy::Touch(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (node == Lists::kNone || node == lists_.Head(kRecency)) return;
  lists_.MoveToHead(node, kRecency);
}

void LruPolicy::TouchRun(std::span<const BlockKey> run) {
  lists_.FindRun(run, kRecency, run_nodes_);
  lists_.MoveRunToHead(run_nodes_, kRecency);
}

void LruPolicy::Erase(const BlockKey& key) {
  if (const Lists::Node node = lists_.Find(key); node != Lists::kNone) lists_.Remove(node);
}

std::optional<BlockKey> LruPolicy::PopVictim() {
  const Lists::Node tail = lists_.Tail(kRecency);
  if (tail == Lists::kNone) return std::nullopt;
  const BlockKey victim = lists_.KeyOf(tail);
  lists_.Remove(tail);
  return victim;
}

}  // namespace kvtier::index
