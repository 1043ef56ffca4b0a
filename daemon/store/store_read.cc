// The store's read path below the host tier: where a reader's block lies (LevelBelowHost,
// LevelOf), promoting a block that lives below the host tier when it is read (PromoteForRead, and
// moving blocks up between any two tiers: Promote), reading it in place (ReadLeased), and dropping
// blocks whose bytes fail verification or cannot be read (DropCorrupt).
#include "daemon/store/store.h"

namespace kvtier::store {

using index::BlockMeta;
using index::BlockState;

size_t Store::LevelBelowHost(const BlockMeta& meta) const {
  const size_t host = LevelOf(TierId::kHost);
  const size_t level = LevelOf(meta.tier);
  return host < level && level < tiers_.size() ? level : tiers_.size();
}

size_t Store::LevelOf(TierId id) const {
  for (size_t level = 0; level < tiers_.size(); ++level) {
    if (tiers_[level]->id() == id) return level;
  }
  return tiers_.size();
}

Status Store::PromoteForRead(const NamespaceId& ns, const BlockKey& key) {
  const size_t host = LevelOf(TierId::kHost);
  // The common daemon without NVMe: nothing lives below the host tier, so no lookup is needed.
  if (host + 1 >= tiers_.size()) return Status::Ok();
  std::optional<BlockMeta> meta = index_->Get(key);
  if (!meta || !meta->VisibleIn(ns)) return Status::Ok();
  // Only blocks below the host tier move up for a reader; a GPU-pool block stays in the GPU.
  const size_t level = LevelBelowHost(*meta);
  if (level >= tiers_.size()) return Status::Ok();
  if (DiskMovesInBackground(level - 1)) {
    // The mover tried and could not (no room in the host tier, a device error): a miss, which
    // the engine recomputes, rather than a read of the disk on this (network) thread or asking
    // again for ever. The next read asks again.
    if (move_requests_.TakeFailedFetch(key, FailuresSince())) {
      return NotFound("block could not be read up from " + std::string(TierName(meta->tier)));
    }
    if (move_requests_.AskForFetch(key) && wake_mover_) wake_mover_();
    return Pending("block is being read up from " + std::string(TierName(meta->tier)));
  }
  // A block that cannot move now (leased by another reader, no room) is leased where it is.
  (void)Promote(level, host, key, *meta);
  return Status::Ok();
}

Store::PromoteOutcome Store::Promote(size_t level, size_t to_level, const BlockKey& key,
                                     const BlockMeta& meta) {
  Result<PinnedMove> move = PrepareMove(to_level, key, meta);
  if (!move.ok()) return PromoteOutcome::kNotMoved;
  MovePinnedBatch(level, to_level, {&*move, 1});
  return SettlePromotion(level, *move);
}

Store::PromoteOutcome Store::SettlePromotion(size_t level, const PinnedMove& move) {
  if (move.status.ok()) {
    read_failures_.Succeeded(move.key);
    tier_counters_[static_cast<size_t>(tiers_[level]->id())].promotions.fetch_add(1);
    return PromoteOutcome::kMoved;
  }
  if (!ReadMakesUnservable(tiers_[level]->id(), move.key, move.meta.extent.offset, move.status)) {
    return PromoteOutcome::kNotMoved;
  }
  DropCorrupt(move.key, move.meta);
  return PromoteOutcome::kCorrupt;
}

Status Store::ReadLeased(const Lease& lease, std::span<std::byte> dst) {
  tiers::Tier* t = tier(lease.tier);
  if (t == nullptr) return Internal("lease names a tier the store does not have");
  if (dst.size() > lease.extent.length) dst = dst.first(lease.extent.length);
  std::optional<NamespaceId> ns = leases_.NamespaceOf(lease.id);
  if (!ns) return NotFound("lease " + std::to_string(lease.id) + " has ended");
  Status st = t->ReadBlock(lease.extent, {*ns, lease.key}, dst);
  if (st.ok()) {
    read_failures_.Succeeded(lease.key);
  } else if (ReadMakesUnservable(lease.tier, lease.key, lease.extent.offset, st)) {
    leases_.MarkCorrupt(lease.id);
  }
  return st;
}

bool Store::ReadMakesUnservable(TierId tier, const BlockKey& key, uint64_t offset,
                                const Status& read) {
  if (read.code() == StatusCode::kChecksumMismatch) return true;
  // Only NVMe's device errors are the block's own (its sectors); elsewhere (a GPU copy) they are
  // the device's, and the block is fine.
  return read.code() == StatusCode::kDeviceError && tier == TierId::kNvme &&
         read_failures_.FailedAgain(key, offset, clock_.NowMicros());
}

void Store::DropCorrupt(const BlockKey& key, const BlockMeta& meta) {
  std::optional<BlockMeta> gone = index_->EraseIf(key, [&](const BlockMeta& m) {
    return m.generation == meta.generation && m.tier == meta.tier && m.lease_count == 0;
  });
  // Counted once per block: a block still leased by other readers is counted by the last one.
  if (!gone) return;
  FreeExtent(*gone);
  RecordDeparture(key, *gone, DepartureReason::kCorrupt);
  tier_counters_[static_cast<size_t>(gone->tier)].corrupt_drops.fetch_add(1);
  counters_.removed_blocks.fetch_add(1);
}

}  // namespace kvtier::store
