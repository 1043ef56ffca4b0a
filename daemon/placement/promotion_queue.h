// PromotionQueue: blocks waiting to be copied up into the GPU tier.
//
// A read on a network thread only records a candidate here (one mutex, one hash-set insert); the
// GPU mover takes candidates in batches and does the copying, so no network thread ever waits for
// the device. The queue is bounded: when it is full a new candidate is refused and counted, and the
// block stays where it is (it is offered again by a later read). A key is queued at most once at a
// time, so a hot block read by many clients costs one entry. Candidates carry the generation of
// the block they were recorded for: the mover skips a key that was removed and stored again since.
// A key queued again by a read while it waits takes that read's generation, so a value replaced and
// then read enough is promoted, not skipped for its predecessor; a retry never overrides it.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "common/keys.h"
#include "common/thread_annotations.h"

namespace kvtier::placement {

struct PromotionCandidate {
  BlockKey key;
  uint64_t generation = 0;  // BlockMeta::generation when the candidate was recorded
  // How often the mover found the block leased and put it back for a later try: a block being
  // read cannot move (readers copy out of its slot), and the blocks read most are the ones most
  // often leased at any instant.
  uint8_t retries = 0;
};

class PromotionQueue {
 public:
  // At most `capacity` candidates wait at once (at least 1).
  explicit PromotionQueue(size_t capacity);

  enum class PushOutcome { kQueued, kAlreadyQueued, kFull };
  PushOutcome Push(const PromotionCandidate& candidate);

  // Moves up to `max` candidates, oldest first, into `out` (cleared first).
  void PopBatch(size_t max, std::vector<PromotionCandidate>& out);

  size_t size() const;

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  std::deque<PromotionCandidate> queue_ GUARDED_BY(mu_);
  // The queued keys, each with the generation of its latest candidate.
  std::unordered_map<BlockKey, uint64_t, Key128Hash> queued_ GUARDED_BY(mu_);
};

}  // namespace kvtier::placement
