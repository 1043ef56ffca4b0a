// TinyLfuPolicy: W-TinyLFU (Einziger, Eytan, Friedman and Manes, "Adaptive Software Cache
// Management", Middleware '18; the policy of Caffeine), over block keys.
//
// A block enters a small LRU "window" (1% of the capacity). The window's overflow is the
// admission candidate for the "main" cache, a segmented LRU: blocks start in its probation part
// and move to its protected part (80% of the main cache) on a use. When the main cache is full,
// the candidate gets in only if the frequency sketch (frequency_sketch.h) says it was used more
// often than the main cache's own victim (the probation part's least recent block); otherwise the
// candidate is the one evicted. So a burst of one-time blocks passes through the window without
// displacing blocks that are reused, and a loop larger than the cache keeps part of itself
// instead of cycling all of it out as LRU does.
//
// Parameters, all the published defaults rather than values tuned to a trace: the 1% window and
// 80% protected share of the paper's W-TinyLFU(1%) and of Caffeine, and the sketch's sizing (one
// 64-bit word per cached key, halving after 10 x capacity uses). Ties go to the victim, as in
// the paper: the incumbent stays unless the newcomer is strictly more popular.
//
// Prefix semantics need no special case: the store inserts and touches a request's blocks from
// the last to the first, so in every segment a prefix's tail is older than its head and goes
// first, and a child's sketch count never exceeds its parent's by much (a use of a child is a use
// of its parent).
//
// A victim the store could not evict (a leased block) comes back through PutBack: into the window
// without counting a use. `capacity_hint_blocks` is the cache size; when 0 the largest size seen
// stands in for it and the sketch is rebuilt (empty) each time that size doubles.
//
// Memory per tracked block: one 24-byte node, one hash table slot, and 8 sketch bytes per block
// of capacity (segmented_lists.h). All operations are O(1). Thread safety: none (see
// EvictionPolicy).
#pragma once

#include <cstdint>
#include <optional>

#include "daemon/index/eviction_policy.h"
#include "daemon/index/frequency_sketch.h"
#include "daemon/index/segmented_lists.h"

namespace kvtier::index {

class TinyLfuPolicy final : public EvictionPolicy {
 public:
  explicit TinyLfuPolicy(size_t capacity_hint_blocks);

  std::string_view name() const override { return "tinylfu"; }
  void Insert(const BlockKey& key) override;
  void PutBack(const BlockKey& key) override;
  void Touch(const BlockKey& key) override;
  void Erase(const BlockKey& key) override;
  std::optional<BlockKey> PopVictim() override;
  bool Contains(const BlockKey& key) const override { return lists_.Find(key) != Lists::kNone; }
  size_t size() const override { return size_; }

  // For tests: the sketch's estimate for `key`, and the size of each segment.
  uint32_t Frequency(const BlockKey& key) const { return sketch_ ? sketch_->Frequency(key) : 0; }
  size_t window_size() const { return lists_.Size(kWindow); }
  size_t probation_size() const { return lists_.Size(kProbation); }
  size_t protected_size() const { return lists_.Size(kProtected); }

 private:
  enum Segment : uint8_t { kWindow = 0, kProbation = 1, kProtected = 2 };
  using Lists = SegmentedLists<3>;

  size_t Capacity() const;
  size_t WindowCapacity() const;
  size_t MainCapacity() const { return Capacity() - WindowCapacity(); }
  size_t ProtectedCapacity() const { return MainCapacity() * 4 / 5; }
  void MaybeGrowSketch();
  void Track(const BlockKey& key);  // into the window; no use counted

  Lists lists_;
  size_t capacity_hint_blocks_;
  size_t largest_size_ = 0;
  size_t size_ = 0;
  std::optional<FrequencySketch> sketch_;  // built by the first Insert
};

}  // namespace kvtier::index
