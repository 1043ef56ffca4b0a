// ReadFailures: which NVMe blocks have had a read fail with a device error, so that a block that
// fails a second time is dropped (a miss from then on) instead of being read, and failing, at every
// request. A first failure keeps the block: a device that recovers (a controller reset, a cable)
// serves it again. A second one is most often a media error on the block's sectors; freeing its
// extent also lets the next write there remap them.
//
// Bounded: past kMaxRemembered blocks the oldest failure is forgotten (that block then gets one
// more chance). Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>

#include "common/keys.h"
#include "common/thread_annotations.h"

namespace kvtier::store {

class ReadFailures {
 public:
  // A read of `key` stored at `offset` failed; true when one had failed before (the same key at
  // the same offset: another copy of the key starts afresh), and then forgets it (the caller
  // drops the block).
  bool FailedAgain(const BlockKey& key, uint64_t offset);

 private:
  static constexpr size_t kMaxRemembered = 4096;

  Mutex mu_;
  std::unordered_map<BlockKey, uint64_t, Key128Hash> failed_ GUARDED_BY(mu_);  // -> offset
  std::deque<BlockKey> order_ GUARDED_BY(mu_);                                 // oldest first
};

}  // namespace kvtier::store
