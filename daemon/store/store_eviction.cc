// The store's eviction path: making room in a tier by demoting its victims to the next tier (NVMe
// admission decides for a disk; a write-through block moves into its copy) or, from the last tier,
// dropping them; and the mover's eviction down to a target (EvictToTarget).
#include <cstring>
#include <vector>

#include "common/stream_copy.h"
#include "daemon/store/store.h"

namespace kvtier::store {

using index::BlockMeta;
using index::BlockState;

// How many single LRU victims an allocation tries before it empties a whole reclaim unit instead.
// Blocks of one size free slots of their own size after one eviction; a long streak of failures
// means the space is held by slabs of other sizes (slab calcification).
constexpr int kEvictionsBeforeReclaim = 4;
constexpr int kReclaimAttempts = 4;

Result<Extent> Store::AllocateWithEviction(size_t level, uint64_t bytes, EvictionMode mode) {
  tiers::Tier& t = *tiers_[level];
  int reclaims = 0;
  for (int evicted = 0;; ++evicted) {
    Result<Extent> extent = t.Allocate(bytes);
    if (extent.ok() || extent.status().code() != StatusCode::kBusy) return extent;
    if (evicted == options_.max_evictions_per_allocation) break;
    const bool reclaim = evicted >= kEvictionsBeforeReclaim && reclaims < kReclaimAttempts;
    if (reclaim) ++reclaims;
    if (!(reclaim ? EvictReclaimUnit(level, mode) : EvictOne(level, mode))) break;
  }
  return Busy(std::string(TierName(t.id())) +
              " tier is full and nothing can be evicted now (blocks leased, pinned or being "
              "written); retry later");
}

bool Store::EvictOne(size_t level, EvictionMode mode) {
  const TierId id = tiers_[level]->id();
  std::optional<std::pair<BlockKey, BlockMeta>> victim = index_->PickVictim(id, clock_.NowMicros());
  if (!victim) return false;
  // A victim that cannot leave right now (leased since it was picked) was handed back to the
  // policy; that still counts as an attempt, so the caller's bound keeps the loop finite.
  DemoteOrDrop(level, victim->first, victim->second, mode);
  return true;
}

bool Store::EvictReclaimUnit(size_t level, EvictionMode mode) {
  tiers::Tier& t = *tiers_[level];
  const uint64_t now = clock_.NowMicros();
  std::optional<std::pair<BlockKey, BlockMeta>> victim = index_->PickVictim(t.id(), now);
  if (!victim) return false;
  index_->Unpick(victim->first);
  const Extent unit = t.ReclaimUnit(victim->second.extent);
  bool any = false;
  for (const auto& [key, meta] : index_->EvictableInRange(t.id(), unit, now)) {
    any |= DemoteOrDrop(level, key, meta, mode);
  }
  return any;
}

bool Store::DemoteOrDrop(size_t level, const BlockKey& key, const BlockMeta& meta,
                         EvictionMode mode) {
  TierCounters& counters = tier_counters_[static_cast<size_t>(meta.tier)];
  const bool below = level + 1 < tiers_.size();
  const bool admitted = below && AdmitBelow(level, meta);
  // kDropOnly waits for no copy: only a move into a write-through copy, an index change, is made.
  const bool may_demote = admitted && (mode == EvictionMode::kDemote || HasCopyBelow(level, meta));
  if (may_demote) {
    switch (Demote(level, key, meta)) {
      case DemoteOutcome::kMoved:
        counters.evictions.fetch_add(1);
        counters.demotions.fetch_add(1);
        return true;
      case DemoteOutcome::kBlockChanged:
        index_->Unpick(key);
        return false;
      case DemoteOutcome::kNoRoomBelow:
      case DemoteOutcome::kCopyFailed:
        // The next tier cannot take the block now: dropping it still makes room, which is what
        // the put asked for; the block is a cache entry, not data of record.
        break;
    }
  }
  std::optional<BlockMeta> gone = index_->EraseIf(key, [&](const BlockMeta& m) {
    return m.state == BlockState::kReady && m.lease_count == 0 && m.generation == meta.generation &&
           m.tier == meta.tier && m.pinned_until_us <= clock_.NowMicros();
  });
  if (!gone) {
    index_->Unpick(key);
    return false;
  }
  FreeExtent(*gone);
  counters.evictions.fetch_add(1);
  counters.drops.fetch_add(1);
  // Why it was dropped rather than moved down, counted once it really was.
  if (below && !admitted) {
    counters.admission_drops.fetch_add(1);
  } else if (below && !may_demote) {
    counters.lag_drops.fetch_add(1);
  }
  counters_.evicted_blocks.fetch_add(1);
  if (NamespaceCounters* c = namespaces_.Counters(gone->ns)) {
    c->evictions.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

bool Store::HasCopyBelow(size_t level, const BlockMeta& meta) const {
  return meta.has_shadow && level + 1 < tiers_.size() && tiers_[level + 1]->id() == TierId::kNvme;
}

bool Store::PinForMove(const BlockKey& key, const BlockMeta& meta) {
  // A lease the store holds itself: without it a Remove could free the extent mid-copy and a new
  // put could write into it while we read. The extent is compared too: a block moved up and back
  // down since `meta` was read keeps its generation and tier but not its extent, and the old one
  // may already hold another block.
  Status pinned = index_->Update(key, [&](BlockMeta& m) {
    if (m.generation != meta.generation || m.state != BlockState::kReady || m.tier != meta.tier ||
        m.extent != meta.extent || m.lease_count != 0) {
      return NotFound("block changed since it was picked");
    }
    m.lease_count = 1;
    return Status::Ok();
  });
  return pinned.ok();
}

void Store::UnpinAfterMove(const BlockKey& key) {
  (void)index_->Update(key, [](BlockMeta& m) {
    --m.lease_count;
    return Status::Ok();
  });
}

Store::DemoteOutcome Store::Demote(size_t level, const BlockKey& key, const BlockMeta& meta) {
  if (HasCopyBelow(level, meta)) return DemoteIntoShadow(level, key, meta);
  if (!PinForMove(key, meta)) return DemoteOutcome::kBlockChanged;
  Result<Extent> dst = AllocateWithEviction(level + 1, meta.extent.length);
  if (!dst.ok()) {
    UnpinAfterMove(key);
    return DemoteOutcome::kNoRoomBelow;
  }
  const Status moved = MovePinned(level, level + 1, key, meta, *dst);
  if (moved.ok()) return DemoteOutcome::kMoved;
  return moved.code() == StatusCode::kDeviceError ? DemoteOutcome::kCopyFailed
                                                  : DemoteOutcome::kBlockChanged;
}

Status Store::MovePinned(size_t level, size_t to_level, const BlockKey& key, const BlockMeta& meta,
                         const Extent& dst) {
  tiers::Tier& from = *tiers_[level];
  tiers::Tier& to = *tiers_[to_level];
  Status st = CopyBetweenTiers(from, meta.extent, to, dst, {meta.ns, key});
  // With write-through a block read up from NVMe keeps its NVMe copy as its shadow: the put was
  // acknowledged as durable, and moving it out of NVMe would lose it at the next crash.
  const bool keep_copy =
      options_.nvme_write_through && from.id() == TierId::kNvme && to.id() != TierId::kNvme;
  if (st.ok()) st = MoveInIndex(key, meta, to.id(), dst, keep_copy);
  if (st.ok()) {
    if (!keep_copy) from.Free(meta.extent);
    return st;
  }
  to.Free(dst);
  UnpinAfterMove(key);
  if (st.code() == StatusCode::kDeviceError) CountCopyError(from, to);
  return st;
}

Status Store::MoveInIndex(const BlockKey& key, const BlockMeta& meta, TierId to, const Extent& dst,
                          bool old_extent_becomes_shadow) {
  using Shadow = index::BlockIndex::ShadowAfterMove;
  // A write-through shadow is the block's copy on NVMe: it stays right while the block moves
  // between GPU and host (the bytes never change), and is what makes the put survive a crash.
  const Shadow shadow = old_extent_becomes_shadow                ? Shadow::kOldExtent
                        : meta.has_shadow && to != TierId::kNvme ? Shadow::kKeep
                                                                 : Shadow::kForget;
  // MoveTier takes our pin back with the move; it refuses while readers hold leases too.
  return index_->MoveTier(key, meta, to, dst, /*mover_pins=*/1, shadow);
}

void Store::CountCopyError(const tiers::Tier& from, const tiers::Tier& to) {
  const tiers::Tier& device = from.id() == TierId::kHost ? to : from;
  tier_counters_[static_cast<size_t>(device.id())].copy_errors.fetch_add(1);
}

Status Store::CopyBetweenTiers(tiers::Tier& from, const Extent& src, tiers::Tier& to,
                               const Extent& dst, const tiers::BlockIdentity& identity) {
  std::byte* src_addr = from.Address(src);
  std::byte* dst_addr = to.Address(dst);
  if (src_addr != nullptr && dst_addr != nullptr) {
    StreamCopy(dst_addr, src_addr, src.length);
    return Status::Ok();
  }
  if (src_addr != nullptr) return to.WriteBlock(dst, identity, {src_addr, src.length});
  if (dst_addr != nullptr) return from.ReadBlock(src, identity, {dst_addr, src.length});
  // Neither tier is plain memory: bounce through a buffer. Not on a hot path today (host is
  // always between GPU and NVMe).
  std::vector<std::byte> bounce(src.length);
  KVTIER_RETURN_IF_ERROR(from.ReadBlock(src, identity, bounce));
  return to.WriteBlock(dst, identity, bounce);
}

void Store::FreeExtent(const BlockMeta& meta) {
  if (tiers::Tier* t = tier(meta.tier)) t->Free(meta.extent);
  if (meta.has_shadow) {
    if (tiers::Tier* t = tier(TierId::kNvme)) t->Free(meta.shadow);
  }
}

bool Store::AdmitBelow(size_t level, const BlockMeta& meta) const {
  // Admission guards the SSD's write budget; moves between memory tiers are free to happen.
  return tiers_[level + 1]->id() != TierId::kNvme || admission_->Admit(meta);
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

size_t Store::EvictToTarget(TierId id, uint64_t target_used_bytes, size_t max_victims) {
  const size_t level = LevelOf(id);
  if (level >= tiers_.size()) return 0;
  std::atomic<uint64_t>& evicting = evicting_bytes_[static_cast<size_t>(id)];
  // The victims are picked together before any is moved: a run of blocks that were used together
  // (one request's prefix) goes down together, instead of interleaved with the victims other
  // threads pick meanwhile, which would leave every prefix with a gap. Bytes other threads have
  // picked and not moved yet count as gone, or every thread would evict down to the target.
  std::vector<std::pair<BlockKey, BlockMeta>> victims;
  const uint64_t now = clock_.NowMicros();
  // Read once: Stats takes the tier's allocation lock, which every put takes too.
  const uint64_t used = tiers_[level]->Stats().used_bytes;
  while (victims.size() < max_victims) {
    const uint64_t leaving = evicting.load(std::memory_order_relaxed);
    if (used <= leaving || used - leaving <= target_used_bytes) break;
    std::optional<std::pair<BlockKey, BlockMeta>> victim = index_->PickVictim(id, now);
    if (!victim) break;  // nothing evictable: everything is leased, pinned or writing
    evicting.fetch_add(victim->second.extent.length, std::memory_order_relaxed);
    victims.push_back(*std::move(victim));
  }
  for (const auto& [key, meta] : victims) {
    // After each one, not after the batch: a put waiting for room may take this block's now.
    const bool moved = DemoteOrDrop(level, key, meta, EvictionMode::kDemote);
    evicting.fetch_sub(meta.extent.length, std::memory_order_relaxed);
    if (moved) move_requests_.NotifyMoved();
  }
  return victims.size();
}

}  // namespace kvtier::store
