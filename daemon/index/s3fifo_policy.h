// S3FifoPolicy: S3-FIFO (Yang, Zhang, Qiu, Yue and Rashmi, "FIFO queues are all you need for
// cache eviction", SOSP '23) over block keys.
//
// Three FIFO queues: a small one (S, 10% of the capacity) that new blocks enter, a main one (M,
// the rest), and a ghost queue (G) of keys evicted from S, as many as M holds. Each resident block
// has a use counter capped at 3. When S is over its share, its oldest block moves to M if it was
// used while in S, and otherwise leaves the cache with its key remembered in G. A block whose key
// is in G goes straight to M when it comes back. M evicts in FIFO order, but a block with a
// non-zero count is put back at M's head with its count less one (the paper's 2-bit CLOCK). So
// most one-time blocks leave after a short stay in S and never disturb M, which "quick demotion"
// is the paper's point; a hit costs a counter increment and no list move.
//
// Parameters are the paper's, not tuned to a trace: S is 10% of the capacity, G holds as many keys
// as M, and counters saturate at 3.
//
// Prefix semantics: the store inserts a request's new blocks from the last to the first, so in S
// and M a prefix's tail is older than its head and leaves first.
//
// A victim the store could not evict (a leased block) comes back through PutBack: at the head of
// the queue it left, its count cleared, without a ghost hit. `capacity_hint_blocks` is the cache
// size; when 0 the largest size seen stands in for it.
//
// Memory per tracked block: one 24-byte node and one hash table slot (segmented_lists.h), for up
// to 1.9x the capacity (resident and ghost keys). PopVictim is O(1) amortised (each block is put
// back at most three times per use); the rest is O(1). Thread safety: none (see EvictionPolicy).
#pragma once

#include <cstdint>
#include <optional>

#include "daemon/index/eviction_policy.h"
#include "daemon/index/segmented_lists.h"

namespace kvtier::index {

class S3FifoPolicy final : public EvictionPolicy {
 public:
  explicit S3FifoPolicy(size_t capacity_hint_blocks);

  std::string_view name() const override { return "s3fifo"; }
  void Insert(const BlockKey& key) override;
  void PutBack(const BlockKey& key) override;
  void Touch(const BlockKey& key) override;
  void Erase(const BlockKey& key) override;
  std::optional<BlockKey> PopVictim() override;
  bool Contains(const BlockKey& key) const override;
  size_t size() const override { return lists_.Size(kSmall) + lists_.Size(kMain); }

  // For tests: the blocks in each queue.
  size_t small_size() const { return lists_.Size(kSmall); }
  size_t main_size() const { return lists_.Size(kMain); }
  size_t ghost_size() const { return lists_.Size(kGhost); }

 private:
  enum Queue : uint8_t { kSmall = 0, kMain = 1, kGhost = 2 };
  using Lists = SegmentedLists<3>;
  static constexpr uint8_t kMaxCount = 3;
  static_assert(kMaxCount <= Lists::kMaxCounter);

  size_t Capacity() const;
  size_t SmallCapacity() const;

  Lists lists_;
  size_t capacity_hint_blocks_;
  size_t largest_size_ = 0;
};

}  // namespace kvtier::index
