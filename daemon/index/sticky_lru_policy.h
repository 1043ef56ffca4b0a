// StickyLruPolicy: LRU that keeps what it holds while the tier thrashes.
//
// LRU gives every new block a full trip through the cache. When the blocks it evicts are still
// young (younger than the time in which most reused blocks come back), the cache is too small for
// the working set it sees: each new prefix pushes out one that was about to be read again, and a
// loop of prefixes a little larger than the cache (coding agents re-reading their whole context
// every turn) misses every time. Then it is better to keep the residents and not store the newest
// request's uncached tail. This policy evicts in LRU order and adds one answer, AdmitsNew(): false
// while both of these hold:
//
//  - the LRU victim is younger than G, the 75th percentile of the reuse gaps the policy observes
//    (the time between two uses of a block, measured on a 1-in-16 sample of keys, resident ones and
//    a ghost list of sampled keys that were evicted or not admitted, so that reuses LRU never saw
//    count too; without the ghost only short gaps would be seen). Until 64 gaps were measured
//    nothing is young: the policy is LRU;
//  - keeping pays: two shadow caches, a plain LRU and a sticky one, each of 1/16 of the capacity,
//    replay the sampled keys, and the sticky one has had more hits recently (counts fading by e^-1
//    every 16 G) by more than two standard deviations of their noise. This set duelling, and its
//    margin, keep the policy at LRU's hit ratio where LRU is right.
//
// The caller then does not store the new block and calls NotAdmitted, which remembers the key in
// the ghost list: the store answers the put REJECTED (the client stops putting that request, which
// leaves its stored head), or drops a victim a full NVMe tier would not take (store_eviction.cc).
// `kvtier simulate` takes the request's deepest new blocks back out (daemon/cli/simulator.h).
// Figures, and how the parameters were chosen (once, for both traces): docs/simulate.md.
//
// Time comes from `now_ms` (the store's clock in the daemon, the trace's timestamps in the
// simulator). Memory per resident block: LRU's node and slot plus an 8-byte time stamp; the ghost
// and the shadows add about 3/16 of a node per block of capacity. Thread safety: none (see
// EvictionPolicy).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/index/eviction_policy.h"
#include "daemon/index/segmented_lists.h"
#include "daemon/index/window_quantile.h"

namespace kvtier::index {

class StickyLruPolicy final : public EvictionPolicy {
 public:
  using Clock = PolicyClock;

  // The constants above. The defaults are what kvtierd runs; `kvtier simulate --policy-params`
  // changes them to measure how much each one matters (docs/simulate.md).
  struct Params {
    uint64_t sample_one_in = 16;    // keys whose gaps are measured and shadows replay (power of 2)
    size_t gap_window = 4096;       // the last gaps G is estimated from
    double gap_quantile = 0.75;     // G: most reuses come back before this
    double duel_memory_gaps = 16;   // hits fade by e^-1 every this many G
    double duel_margin_sigmas = 2;  // by how much the sticky shadow must win
    double ghost_factor = 1;        // ghost keys: this times capacity / sample_one_in
  };
  // "name=value,name=value" over the fields above, named sample, window, quantile, memory,
  // margin, ghost; the rest keep their defaults. kInvalidArgument naming the bad part.
  static Result<Params> ParseParams(std::string_view spec);

  // `capacity_hint_blocks` sizes the ghost and the shadows; when 0 (or smaller than what the
  // policy has held) the largest size seen stands in for it.
  explicit StickyLruPolicy(size_t capacity_hint_blocks, Clock now_ms = SteadyMillis);
  StickyLruPolicy(size_t capacity_hint_blocks, Clock now_ms, const Params& params);

  std::string_view name() const override { return "sticky"; }
  void Insert(const BlockKey& key) override;
  // Back at the head with a fresh time stamp, as before, but no gap measured: not a reuse.
  void PutBack(const BlockKey& key) override;
  void Touch(const BlockKey& key) override;
  // One clock read for the run: reading it per key was an eighth of an 8,192-key lookup. The run's
  // nodes are found and moved together (SegmentedLists::FindRun, MoveRunToHead).
  void TouchRun(std::span<const BlockKey> run) override;
  // Moves a resident to the head without measuring a gap, replaying it in the shadows or changing
  // its time stamp (the last use, which Young compares). So after refreshes the LRU tail need not
  // carry the oldest stamp, and the shadows keep the order of uses, not the cache's: Young and the
  // duel judge how long since a block was used, which is what the gaps measure.
  void Refresh(const BlockKey& key) override;
  void Erase(const BlockKey& key) override;
  std::optional<BlockKey> PopVictim() override;
  bool Contains(const BlockKey& key) const override;
  size_t size() const override { return lists_.Size(kResident); }
  bool AdmitsNew() override;
  void NotAdmitted(const BlockKey& key) override;

  // For tests and `kvtier simulate`.
  bool protecting() const;
  std::optional<uint64_t> reuse_gap_ms() const;  // G; nullopt until enough gaps were seen
  size_t ghost_size() const { return lists_.Size(kGhost); }

  static uint64_t SteadyMillis();

 private:
  enum Segment : uint8_t { kResident = 0, kGhost = 1 };
  using Lists = SegmentedLists<2>;

  // An LRU over the sampled keys at 1/16 of the capacity, scoring its hits.
  struct Shadow {
    SegmentedLists<1> keys;
    std::vector<uint64_t> stamps;  // by node
    double score = 0;
    uint64_t last_replay = 0;
    bool sticky = false;
  };

  // Insert and PutBack: the key becomes the most recent resident; `observe` measures its gap.
  void Track(const BlockKey& key, bool observe);
  bool Sampled(const BlockKey& key) const;
  size_t Capacity() const;
  bool Young(uint64_t last_use, uint64_t now) const;
  void Stamp(Lists::Node node, uint64_t now);
  void RecordGap(uint64_t gap_ms);
  void RememberInGhost(const BlockKey& key, uint64_t stamp);
  // A sampled key was used at `now`; `node` is its node (resident or ghost), kNone when it has
  // none.
  void Observe(const BlockKey& key, Lists::Node node, uint64_t now);
  void Replay(Shadow& shadow, const BlockKey& key, uint64_t now);
  // A use of the resident `node` (`key`) at `now` (Touch; TouchRun does the same, its moves
  // together).
  void Use(Lists::Node node, const BlockKey& key, uint64_t now);

  Clock now_ms_;
  const Params params_;
  size_t capacity_hint_;
  size_t peak_size_ = 0;
  Lists lists_;                         // residents (LRU order) and ghost keys (FIFO)
  std::vector<uint64_t> stamps_;        // by node: last use (resident), when it left (ghost)
  WindowQuantile gaps_;                 // the last gap_window reuse gaps, ms
  std::vector<Lists::Node> run_nodes_;  // TouchRun's, kept between calls
  size_t gaps_since_estimate_ = 0;
  uint64_t gap_estimate_ = UINT64_MAX;
  Shadow lru_shadow_, sticky_shadow_;
};

}  // namespace kvtier::index
