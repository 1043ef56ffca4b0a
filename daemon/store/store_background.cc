// The store's side of background_disk_moves: requests that would wait for a disk ask the mover
// instead (AllocateOrAskForRoom, PromoteForRead), and the mover's calls that do the moves
// (MakeRoom, Fetch).
#include "daemon/store/store.h"

namespace kvtier::store {

using index::BlockMeta;
using index::BlockState;

bool Store::DiskMovesInBackground(size_t level) const {
  return options_.background_disk_moves && level + 1 < tiers_.size() &&
         tiers_[level + 1]->id() == TierId::kNvme;
}

Result<Extent> Store::AllocateOrAskForRoom(uint64_t bytes) {
  Result<Extent> extent = tiers_[put_level_]->Allocate(bytes);
  if (extent.ok() || extent.status().code() != StatusCode::kBusy) return extent;
  // Evicting here would write victims to NVMe on this (network) thread. The mover keeps room
  // ahead of demand between its watermarks; this put arrived faster than that.
  move_requests_.AskForRoom(bytes);
  if (wake_mover_) wake_mover_();
  if (options_.drop_when_disk_lags) {
    // Puts outrun the disk: the coldest blocks the mover has not reached yet make the room. The
    // cache keeps what the disk can take, and the put does not wait for it.
    extent = AllocateWithEviction(put_level_, bytes, EvictionMode::kDropOnly);
    if (extent.ok() || extent.status().code() != StatusCode::kBusy) return extent;
  }
  return Pending(std::string(TierName(tiers_[put_level_]->id())) +
                 " tier is full; room is being made");
}

bool Store::MakeRoom(uint64_t bytes) {
  // Evicts as a put without a mover would, then gives the space back for the put that asked:
  // another put may take it first, and then asks again.
  Result<Extent> extent = AllocateWithEviction(put_level_, bytes);
  if (!extent.ok()) return false;
  tiers_[put_level_]->Free(*extent);
  move_requests_.NotifyMoved();
  return true;
}

void Store::PrefetchForRead(const NamespaceId& ns, std::span<const BlockKey> keys) {
  if (!options_.background_disk_moves || !options_.promote_on_read) return;
  bool asked = false;
  for (const BlockKey& key : keys) {
    std::optional<BlockMeta> meta = index_->Get(key);
    // Past the first miss nothing will be read: the rest of a chain is useless without it.
    if (!meta || meta->state != BlockState::kReady || meta->ns != ns) break;
    const size_t level = LevelBelowHost(*meta);
    if (level < tiers_.size() && DiskMovesInBackground(level - 1)) {
      asked |= move_requests_.AskForFetch(key);
    }
  }
  if (asked && wake_mover_) wake_mover_();
}

void Store::Fetch(const BlockKey& key) { move_requests_.FinishFetch(key, FetchOne(key)); }

bool Store::FetchOne(const BlockKey& key) {
  std::optional<BlockMeta> meta = index_->Get(key);
  if (!meta || meta->state != BlockState::kReady) return true;  // gone: the reader will miss
  const size_t level = LevelBelowHost(*meta);
  if (level >= tiers_.size()) return true;  // up already
  // A corrupt block is dropped by Promote: the reader then misses, which is the right answer.
  return Promote(level, LevelOf(TierId::kHost), key, *meta) != PromoteOutcome::kNotMoved;
}

}  // namespace kvtier::store
