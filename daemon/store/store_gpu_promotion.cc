// The store's GPU promotion path: recording the host blocks that the promotion policy picks when
// they are read (cheap, on the network threads), and the GPU mover's copying of them into the
// GPU tier (PromoteCandidates, on its own thread).
#include <vector>

#include "daemon/store/store.h"

namespace kvtier::store {

using index::BlockMeta;
using index::BlockState;

// How many times a leased candidate is put back before it is skipped: at the daemon's 10 ms mover
// tick, readers get 80 ms to finish. A block leased all that time is offered again by its next
// read.
constexpr uint8_t kMaxCandidateRetries = 8;

void Store::QueueForGpu(const BlockKey& key, uint64_t generation) {
  switch (promotion_queue_.Push({key, generation})) {
    case placement::PromotionQueue::PushOutcome::kQueued:
      counters_.gpu_candidates.fetch_add(1, std::memory_order_relaxed);
      break;
    case placement::PromotionQueue::PushOutcome::kAlreadyQueued:
      break;
    case placement::PromotionQueue::PushOutcome::kFull:
      // The mover is behind; the block stays in host and is offered again by a later read.
      counters_.gpu_candidates_dropped.fetch_add(1, std::memory_order_relaxed);
      break;
  }
}

size_t Store::PromoteCandidates(size_t max_blocks) {
  if (gpu_level_ >= tiers_.size()) return 0;
  std::vector<placement::PromotionCandidate> batch;
  promotion_queue_.PopBatch(max_blocks, batch);
  size_t moved = 0;
  for (placement::PromotionCandidate& candidate : batch) {
    switch (PromoteCandidate(candidate)) {
      case CandidateOutcome::kMoved:
        ++moved;
        continue;
      case CandidateOutcome::kLeased:
        // Back of the queue, for the next call: this one has already taken its batch.
        if (candidate.retries < kMaxCandidateRetries) {
          ++candidate.retries;
          if (promotion_queue_.Push(candidate) != placement::PromotionQueue::PushOutcome::kFull) {
            continue;
          }
        }
        break;
      case CandidateOutcome::kSkipped:
        break;
    }
    counters_.gpu_promotions_skipped.fetch_add(1, std::memory_order_relaxed);
  }
  return moved;
}

Store::CandidateOutcome Store::PromoteCandidate(const placement::PromotionCandidate& candidate) {
  std::optional<BlockMeta> meta = index_->Get(candidate.key);
  // Only the incarnation that was read, and only while it is still in host: a block removed and
  // put again since was not read as often, and one already moved has nothing left to do here.
  if (!meta || meta->state != BlockState::kReady || meta->generation != candidate.generation ||
      meta->tier != TierId::kHost || !namespaces_.Registered(meta->ns)) {
    return CandidateOutcome::kSkipped;
  }
  if (meta->lease_count > 0) return CandidateOutcome::kLeased;
  // Promote pins the block (refusing one leased since the look above), makes room in the GPU tier
  // by demoting its least recently used blocks to host, copies with no lock held and repoints the
  // block only if nobody changed it meanwhile; the host copy is freed then.
  return Promote(LevelOf(TierId::kHost), gpu_level_, candidate.key, *meta) == PromoteOutcome::kMoved
             ? CandidateOutcome::kMoved
             : CandidateOutcome::kSkipped;
}

}  // namespace kvtier::store
