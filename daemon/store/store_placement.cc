// The store's placement path: promoting blocks that live below the host tier when they are read
// (and moving blocks between any two tiers: Promote), reading them in place, dropping blocks whose
// bytes fail verification, the background mover's eviction to a target, NVMe admission, and
// adopting blocks found at start-up.
#include <vector>

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

bool Store::AdmitBelow(size_t level, const BlockMeta& meta) const {
  // Admission guards the SSD's write budget; moves between memory tiers are free to happen.
  return tiers_[level + 1]->id() != TierId::kNvme || admission_->Admit(meta);
}

Status Store::PromoteForRead(const NamespaceId& ns, const BlockKey& key) {
  const size_t host = LevelOf(TierId::kHost);
  // The common daemon without NVMe: nothing lives below the host tier, so no lookup is needed.
  if (host + 1 >= tiers_.size()) return Status::Ok();
  std::optional<BlockMeta> meta = index_->Get(key);
  if (!meta || meta->state != BlockState::kReady || meta->ns != ns) return Status::Ok();
  // Only blocks below the host tier move up for a reader; a GPU-pool block stays in the GPU.
  const size_t level = LevelBelowHost(*meta);
  if (level >= tiers_.size()) return Status::Ok();
  if (DiskMovesInBackground(level - 1)) {
    // The mover tried and could not: lease it where it lies rather than ask again forever.
    if (move_requests_.TakeFailedFetch(key)) return Status::Ok();
    if (move_requests_.AskForFetch(key) && wake_mover_) wake_mover_();
    return Pending("block is being read up from " + std::string(TierName(meta->tier)));
  }
  // A block that cannot move now (leased by another reader, no room) is leased where it is.
  (void)Promote(level, host, key, *meta);
  return Status::Ok();
}

Store::PromoteOutcome Store::Promote(size_t level, size_t to_level, const BlockKey& key,
                                     const BlockMeta& meta) {
  if (!PinForMove(key, meta)) return PromoteOutcome::kNotMoved;
  Result<Extent> dst = AllocateWithEviction(to_level, meta.extent.length);
  if (!dst.ok()) {
    UnpinAfterMove(key);
    return PromoteOutcome::kNotMoved;
  }
  const Status moved = MovePinned(level, to_level, key, meta, *dst);
  if (moved.ok()) {
    tier_counters_[static_cast<size_t>(tiers_[level]->id())].promotions.fetch_add(1);
    return PromoteOutcome::kMoved;
  }
  if (moved.code() != StatusCode::kChecksumMismatch) return PromoteOutcome::kNotMoved;
  DropCorrupt(key, meta);
  return PromoteOutcome::kCorrupt;
}

Status Store::ReadLeased(const Lease& lease, std::span<std::byte> dst) {
  tiers::Tier* t = tier(lease.tier);
  if (t == nullptr) return Internal("lease names a tier the store does not have");
  if (dst.size() > lease.extent.length) dst = dst.first(lease.extent.length);
  std::optional<NamespaceId> ns = leases_.NamespaceOf(lease.id);
  if (!ns) return NotFound("lease " + std::to_string(lease.id) + " has ended");
  Status st = t->ReadBlock(lease.extent, {*ns, lease.key}, dst);
  if (st.code() == StatusCode::kChecksumMismatch) leases_.MarkCorrupt(lease.id);
  return st;
}

void Store::WriteThrough(const BlockKey& key, uint64_t generation) {
  const size_t level = LevelOf(TierId::kNvme);
  std::optional<BlockMeta> meta = index_->Get(key);
  if (level >= tiers_.size() || !meta || meta->generation != generation || meta->has_shadow ||
      meta->tier != TierId::kHost || !PinForMove(key, *meta)) {
    return;  // no NVMe tier, or the block already changed: nothing to write
  }
  tiers::Tier& nvme = *tiers_[level];
  tiers::Tier& host = *tier(TierId::kHost);
  Result<Extent> dst = AllocateWithEviction(level, meta->extent.length);
  Status written =
      dst.ok() ? CopyBetweenTiers(host, meta->extent, nvme, *dst, {meta->ns, key}) : dst.status();
  bool attached = false;
  if (written.ok()) {
    attached = index_
                   ->Update(key,
                            [&](BlockMeta& m) {
                              if (m.generation != generation || m.has_shadow) {
                                return NotFound("block changed");
                              }
                              m.shadow = *dst;
                              m.has_shadow = true;
                              return Status::Ok();
                            })
                   .ok();
  }
  UnpinAfterMove(key);
  if (attached) {
    counters_.write_throughs.fetch_add(1);
    return;
  }
  if (dst.ok()) nvme.Free(*dst);
  if (!written.ok()) counters_.write_through_failures.fetch_add(1);
}

Store::DemoteOutcome Store::DemoteIntoShadow(size_t level, const BlockKey& key,
                                             const BlockMeta& meta) {
  if (!PinForMove(key, meta)) return DemoteOutcome::kBlockChanged;
  // MoveTier checks that this is still the incarnation (and so the shadow) we were given.
  Status moved = index_->MoveTier(key, meta, TierId::kNvme, meta.shadow, /*mover_pins=*/1);
  if (!moved.ok()) {
    UnpinAfterMove(key);
    return DemoteOutcome::kBlockChanged;
  }
  tiers_[level]->Free(meta.extent);
  return DemoteOutcome::kMoved;
}

void Store::DropCorrupt(const BlockKey& key, const BlockMeta& meta) {
  std::optional<BlockMeta> gone = index_->EraseIf(key, [&](const BlockMeta& m) {
    return m.generation == meta.generation && m.tier == meta.tier && m.lease_count == 0;
  });
  // Counted once per block: a block still leased by other readers is counted by the last one.
  if (!gone) return;
  FreeExtent(*gone);
  tier_counters_[static_cast<size_t>(gone->tier)].corrupt_drops.fetch_add(1);
  counters_.removed_blocks.fetch_add(1);
}

size_t Store::EvictToTarget(TierId id, uint64_t target_used_bytes, size_t max_victims) {
  const size_t level = LevelOf(id);
  if (level >= tiers_.size()) return 0;
  const uint64_t used = tiers_[level]->Stats().used_bytes;
  if (used <= target_used_bytes) return 0;
  // The victims are picked together before any is moved: a run of blocks that were used together
  // (one request's prefix) goes down together, instead of interleaved with the victims other
  // threads pick meanwhile, which would leave every prefix with a gap.
  std::vector<std::pair<BlockKey, BlockMeta>> victims;
  uint64_t picked = 0;
  const uint64_t now = clock_.NowMicros();
  while (victims.size() < max_victims && used - picked > target_used_bytes) {
    std::optional<std::pair<BlockKey, BlockMeta>> victim =
        index_->PickVictim(tiers_[level]->id(), now);
    if (!victim) break;  // nothing evictable: everything is leased, pinned or writing
    picked += victim->second.extent.length;
    victims.push_back(*std::move(victim));
  }
  for (const auto& [key, meta] : victims) DemoteOrDrop(level, key, meta, EvictionMode::kDemote);
  // Puts waiting for room may find it now.
  if (!victims.empty()) move_requests_.NotifyMoved();
  return victims.size();
}

Status Store::AdoptBlock(TierId id, const NamespaceId& ns, const BlockKey& key,
                         const Extent& extent, std::optional<uint64_t> checksum) {
  if (LevelOf(id) >= tiers_.size()) {
    return InvalidArgument("cannot adopt a block of tier '" + std::string(TierName(id)) +
                           "': the store does not have it");
  }
  if (namespaces_.AdoptionRefused(ns)) {
    return Rejected("namespace " + ns.ToHex() + " was dropped after the start");
  }
  BlockMeta meta;
  meta.ns = ns;
  meta.extent = extent;
  meta.tier = id;
  meta.state = BlockState::kReady;
  meta.generation = next_id_.fetch_add(1);
  meta.has_checksum = checksum.has_value();
  meta.checksum = checksum.value_or(0);
  KVTIER_RETURN_IF_ERROR(index_->InsertReady(key, meta));
  counters_.adopted_blocks.fetch_add(1);
  return Status::Ok();
}

}  // namespace kvtier::store
