// The store's side of background_disk_moves: requests that would wait for a disk ask the mover
// instead (AllocateOrAskForRoom, PromoteForRead), and the mover's calls that do the moves
// (MakeRoom, Fetch).
#include "daemon/store/store.h"

namespace kvtier::store {

using index::BlockMeta;
using index::BlockState;

bool Store::DiskMovesInBackground(size_t level) const {
  if (!options_.background_disk_moves) return false;
  if (PublishesDrops(level)) return true;
  return level + 1 < tiers_.size() && tiers_[level + 1]->id() == TierId::kNvme;
}

Result<Extent> Store::AllocateOrAskForRoom(uint64_t bytes, uint8_t requester) {
  Result<Extent> extent = tiers_[put_level_]->Allocate(bytes);
  if (extent.ok() || extent.status().code() != StatusCode::kBusy) return extent;
  // Evicting here would write victims to NVMe on this (network) thread. The mover keeps room
  // ahead of demand between its watermarks; this put arrived faster than that.
  move_requests_.AskForRoom(bytes);
  if (wake_mover_) wake_mover_();
  if (options_.drop_when_disk_lags) {
    // Puts outrun the disk: the coldest blocks the mover has not reached yet make the room. The
    // cache keeps what the disk can take, and the put does not wait for it.
    extent = AllocateWithEviction(put_level_, bytes, EvictionMode::kDropOnly, requester);
    if (extent.ok() || extent.status().code() != StatusCode::kBusy) return extent;
  }
  return Pending(std::string(TierName(tiers_[put_level_]->id())) +
                 " tier is full; room is being made");
}

bool Store::MakeRoom(uint64_t bytes) {
  if (PublishesDrops(put_level_)) return MakeRoomByPublishing(bytes);
  // Evicts as a put without a mover would, then gives the space back for the put that asked:
  // another put may take it first, and then asks again.
  Result<Extent> extent = AllocateWithEviction(put_level_, bytes);
  if (!extent.ok()) return false;
  tiers_[put_level_]->Free(*extent);
  move_requests_.NotifyMoved();
  return true;
}

void Store::PrefetchForRead(const NamespaceId& ns, std::span<const BlockKey> keys) {
  if (!options_.background_disk_moves) return;
  bool asked = false;
  size_t local = 0;
  for (; local < keys.size(); ++local) {
    std::optional<BlockMeta> meta = index_->Get(keys[local]);
    // Past the first miss nothing will be read: the rest of a chain is useless without it.
    if (!meta || !meta->VisibleIn(ns)) break;
    const size_t level = LevelBelowHost(*meta);
    if (options_.promote_on_read && level < tiers_.size() && DiskMovesInBackground(level - 1)) {
      asked |= move_requests_.AskForFetch(keys[local]);
    }
  }
  // Where the local chain ends, the remote tier may hold the rest: asked for together, the mover
  // fetches them as one batch instead of one round trip per block as the reader reaches each.
  asked |= PrefetchRemote(ns, keys.subspan(local));
  if (asked && wake_mover_) wake_mover_();
}

void Store::Fetch(std::span<const BlockKey> keys) {
  // Read up together, so that the device sees the whole batch at once. Below the host tier there
  // can only be NVMe (tier ids are unique and a GPU tier comes first), so the batch lies there.
  const size_t host = LevelOf(TierId::kHost);
  const size_t nvme = LevelOf(TierId::kNvme);
  // Room for a block read up is made as a put's is: with drop_when_disk_lags the coldest host
  // blocks are dropped rather than written first, so that the reader does not wait for a write.
  const EvictionMode room =
      options_.drop_when_disk_lags ? EvictionMode::kDropOnly : EvictionMode::kDemote;
  std::vector<PinnedMove> batch;
  for (const BlockKey& key : keys) {
    std::optional<BlockMeta> meta = index_->Get(key);
    // Gone, or up already: the reader will miss, or find it where it is now.
    if (!meta || meta->state != BlockState::kReady || nvme >= tiers_.size() ||
        LevelBelowHost(*meta) != nvme) {
      move_requests_.FinishFetch(key, true);
      continue;
    }
    Result<PinnedMove> move = PrepareMove(host, key, *meta, room);
    if (!move.ok()) {
      move_requests_.FinishFetch(key, false);  // leased, changed, or no room: a miss
      continue;
    }
    batch.push_back(*std::move(move));
  }
  if (batch.empty()) return;
  MovePinnedBatch(nvme, host, batch);
  for (const PinnedMove& move : batch) {
    // A corrupt or unreadable block is dropped: the reader then misses, which is the right answer.
    const bool settled = SettlePromotion(nvme, move) != PromoteOutcome::kNotMoved;
    move_requests_.FinishFetch(move.key, settled);
  }
}

}  // namespace kvtier::store
