// ReadFailures: which NVMe blocks have had a read fail with a device error, so that a block whose
// reads keep failing is dropped (a miss from then on) instead of being read, and failing, at every
// request. A block is dropped when a read fails at least kMinGapUs after a first failure with no
// successful read between them: a device that recovers within that time (a controller reset)
// serves its blocks again, and a read that succeeds forgets the failure. Failing on and on is most
// often a media error on the block's sectors; freeing its extent also lets the next write there
// remap them.
//
// Bounded: past kMaxRemembered failures the oldest is forgotten (that block then gets one more
// chance); a failure forgotten early (a read that succeeded, a drop) does not make a later failure
// of the same key forgotten before its turn. Thread safety: every method may be called from any
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <unordered_map>

#include "common/keys.h"
#include "common/thread_annotations.h"

namespace kvtier::store {

class ReadFailures {
 public:
  static constexpr uint64_t kMinGapUs = 10'000'000;

  // A read of `key` stored at `offset` failed at `now_us`; true when the block is to be dropped:
  // its first failure (of the same key at the same offset: another copy starts afresh) was at
  // least kMinGapUs ago. The block is then forgotten.
  bool FailedAgain(const BlockKey& key, uint64_t offset, uint64_t now_us);
  // A read of `key` succeeded: its failure, if any, is forgotten. Free when none is remembered.
  void Succeeded(const BlockKey& key);

 private:
  static constexpr size_t kMaxRemembered = 4096;
  struct FirstFailure {
    uint64_t offset = 0;
    uint64_t at_us = 0;
    uint64_t serial = 0;  // its place in order_
  };
  struct Remembered {
    BlockKey key;
    uint64_t serial = 0;  // stale once failed_[key] holds another (or none)
  };

  // Remembers `key`'s first failure, at the back of order_, and forgets the oldest past the bound.
  void Remember(const BlockKey& key, uint64_t offset, uint64_t now_us) REQUIRES(mu_);

  Mutex mu_;
  std::unordered_map<BlockKey, FirstFailure, Key128Hash> failed_ GUARDED_BY(mu_);
  // Oldest first; entries whose failure was forgotten early stay until they reach the front.
  std::deque<Remembered> order_ GUARDED_BY(mu_);
  uint64_t next_serial_ GUARDED_BY(mu_) = 0;
  std::atomic<size_t> remembered_{0};           // failed_.size(), read without the lock
};

}  // namespace kvtier::store
