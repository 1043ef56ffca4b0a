// The store's eviction path: making room in a tier by demoting its victims to the next tier (NVMe
// admission decides for a disk; a write-through block moves into its copy) or, from the last tier,
// dropping them; and the mover's eviction down to a target (EvictToTarget).
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "common/stream_copy.h"
#include "daemon/store/store.h"

namespace kvtier::store {

using index::BlockMeta;
using index::BlockState;

// How many single LRU victims an allocation tries before it empties a whole reclaim unit instead.
// Blocks of one size free slots of their own size after one eviction; a long streak of failures
// means the space is held by slabs of other sizes (slab calcification), or, on NVMe, by smaller
// blocks whose least recently used ones lie apart.
constexpr int kEvictionsBeforeReclaim = 4;
constexpr int kReclaimAttempts = 4;

Result<Extent> Store::AllocateWithEviction(size_t level, uint64_t bytes, EvictionMode mode,
                                           uint8_t requester) {
  tiers::Tier& t = *tiers_[level];
  int reclaims = 0;
  uint64_t hard_cap = 0;  // past the bound: each block of the tier once more, at most
  uint64_t copy_room = t.FootprintOf(bytes);  // what the next drop of NVMe copies frees
  for (uint64_t evicted = 0;; ++evicted) {
    Result<Extent> extent = t.Allocate(bytes);
    if (extent.ok() || extent.status().code() != StatusCode::kBusy) return extent;
    if (evicted >= static_cast<uint64_t>(options_.max_evictions_per_allocation)) {
      if (!NeedsMoreVictims(level, bytes)) break;
      if (hard_cap == 0) hard_cap = evicted + t.Stats().block_count + 1;
      if (evicted >= hard_cap) break;  // victims handed back (leased since they were picked)
    }
    const bool reclaim = evicted >= kEvictionsBeforeReclaim && reclaims < kReclaimAttempts;
    if (reclaim) ++reclaims;
    if (!(reclaim ? EvictReclaimUnit(level, mode, requester, bytes)
                  : EvictOne(level, mode, requester))) {
      // Nothing left to evict: copies of memory blocks kept on NVMe may still hold the room.
      // Each drop walks the tier's blocks and frees twice what the last one did: a few walks,
      // where the alternative is refusing the block.
      if (DropCopiesIn(t, kWholeTier, copy_room) > 0) {
        copy_room = copy_room > std::numeric_limits<uint64_t>::max() / 2
                        ? std::numeric_limits<uint64_t>::max()
                        : copy_room * 2;
        continue;
      }
      break;
    }
  }
  return Busy(std::string(TierName(t.id())) +
              " tier is full and nothing can be evicted now (blocks leased, pinned or being "
              "written); retry later");
}

bool Store::NeedsMoreVictims(size_t level, uint64_t bytes) const {
  // Below the put tier only moves allocate, on the mover's threads; a request waits for one only
  // through nvme.write_through, and then at most limits.mover_wait_ms. There a block far larger
  // than its neighbours (2 MiB among 4 KiB values on NVMe, 8 KiB each with the record header)
  // needs more victims than the bound even when they lie side by side; stopping at it dropped the
  // newer block being demoted while older ones stayed. So it goes on while the tier's free bytes
  // are under twice the block's footprint: the victims so far freed no more than this block and
  // the next one like it take. Where the victims lie scattered, the reclaims between them (the
  // NVMe tier's ReclaimUnit: the block's room from a victim on) make one hole; should those fail
  // too (blocks in the room leased or being written), free bytes can pass that mark with no hole
  // large enough, and the block is dropped after twice the victims it needed.
  if (level <= put_level_) return false;
  const tiers::Tier& t = *tiers_[level];
  return t.Stats().free_bytes() < 2 * t.FootprintOf(bytes);
}

bool Store::EvictOne(size_t level, EvictionMode mode, uint8_t requester) {
  const TierId id = tiers_[level]->id();
  std::optional<std::pair<BlockKey, BlockMeta>> victim =
      index_->PickVictim(id, clock_.NowMicros(), requester);
  if (!victim) return false;
  // A victim that cannot leave right now (leased since it was picked) is handed back to the
  // policy; that still counts as an attempt, so the caller's bound keeps the loop finite.
  DropPickedVictims(level, {&*victim, 1}, mode);
  return true;
}

void Store::DropPickedVictims(size_t level, std::span<const std::pair<BlockKey, BlockMeta>> victims,
                              EvictionMode mode) {
  const std::vector<BlockKey> kept = PublishBeforeDrop(level, victims);
  for (const auto& [key, meta] : victims) {
    if (std::find(kept.begin(), kept.end(), key) != kept.end()) {
      index_->Unpick(key);  // leased since it was picked: it stays
    } else {
      DemoteOrDrop(level, key, meta, mode);
    }
  }
}

std::vector<BlockKey> Store::PublishBeforeDrop(
    size_t level, std::span<const std::pair<BlockKey, BlockMeta>> victims) {
  // Only below the put tier: there only moves allocate (a demotion, a write-through copy), and
  // with a remote tier every move runs on the mover's threads, which may wait for the network. A
  // put's own room in the put tier is made by MakeRoomByPublishing, or dropped unpublished when
  // the disk lags (a request thread never waits for the network).
  if (level > put_level_ && PublishesDrops(level)) return PublishToRemote(level, victims);
  return {};
}

bool Store::EvictReclaimUnit(size_t level, EvictionMode mode, uint8_t requester, uint64_t bytes) {
  tiers::Tier& t = *tiers_[level];
  const uint64_t now = clock_.NowMicros();
  std::optional<std::pair<BlockKey, BlockMeta>> victim = index_->PickVictim(t.id(), now, requester);
  if (!victim) return false;
  index_->Unpick(victim->first);
  const Extent unit = t.ReclaimUnit(victim->second.extent, bytes);
  bool any = false;
  const std::vector<std::pair<BlockKey, BlockMeta>> victims =
      EvictableInUnit(t, unit, *victim, now);
  const std::vector<BlockKey> kept = PublishBeforeDrop(level, victims);
  for (const auto& [key, meta] : victims) {
    if (std::find(kept.begin(), kept.end(), key) != kept.end()) continue;
    any |= DemoteOrDrop(level, key, meta, mode);
  }
  // A copy kept from a read up lies in the unit like a block, and no victim search finds it.
  if (unit != victim->second.extent) any |= DropCopiesIn(t, unit) > 0;
  return any;
}

size_t Store::DropCopiesIn(tiers::Tier& t, const Extent& unit, uint64_t enough_bytes) {
  // Write-through copies make their puts durable: they are never given up for room.
  if (options_.nvme_write_through || t.id() != TierId::kNvme || index_->shadow_bytes() == 0) {
    return 0;
  }
  std::optional<std::vector<tiers::BlockIdentity>> named = t.BlocksStartingIn(unit);
  if (!named) return 0;
  size_t dropped = 0;
  uint64_t freed = 0;
  for (const tiers::BlockIdentity& id : *named) {
    if (freed >= enough_bytes) break;
    const std::optional<BlockMeta> meta = index_->Get(id.key);
    if (!meta || meta->tier == t.id() || !meta->has_shadow) continue;
    const Extent copy = meta->shadow;
    if (copy.offset < unit.offset || copy.offset - unit.offset >= unit.length) continue;
    if (DropCopyOf(t, id.key, *meta)) {
      freed += t.FootprintOf(copy.length);
      ++dropped;
    }
  }
  return dropped;
}

bool Store::DropCopyOf(tiers::Tier& nvme, const BlockKey& key, const BlockMeta& meta) {
  if (options_.nvme_write_through || !meta.has_shadow) return false;
  const Extent copy = meta.shadow;
  // Under the entry's lock, so that a move into the copy (DemoteIntoShadow, which checks the
  // copy is still there) and this drop cannot both have it. A block pinned for a move is left:
  // the move, which decided from the copy, would be refused.
  const Status cleared = index_->Update(key, [&](BlockMeta& m) {
    if (m.generation != meta.generation || !m.has_shadow || !(m.shadow == copy)) {
      return NotFound("the copy changed");
    }
    if (m.lease_count != 0) return Busy("the block is being read or moved");
    m.has_shadow = false;
    return Status::Ok();
  });
  if (!cleared.ok()) return false;
  nvme.Free(copy);
  return true;
}

std::vector<std::pair<BlockKey, index::BlockMeta>> Store::EvictableInUnit(
    const tiers::Tier& t, const Extent& unit, const std::pair<BlockKey, BlockMeta>& victim,
    uint64_t now_us) const {
  // A unit that is the victim alone (a tier without larger units) holds no other block.
  if (unit == victim.second.extent) {
    return index_->EvictableInRange(t.id(), unit, {&victim.first, 1}, now_us);
  }
  // A scan of the whole index (every entry, under each shard's lock in turn) only where the tier
  // cannot name the blocks itself: the slab tiers, whose units are whole slabs.
  std::optional<std::vector<tiers::BlockIdentity>> named = t.BlocksStartingIn(unit);
  if (!named) return index_->EvictableInRange(t.id(), unit, now_us);
  std::vector<BlockKey> keys;
  keys.reserve(named->size());
  for (const tiers::BlockIdentity& id : *named) keys.push_back(id.key);
  // Two copies of one block (a newer one written before the older was freed) name it twice.
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return index_->EvictableInRange(t.id(), unit, keys, now_us);
}

Store::EvictionPlan Store::PlanEviction(size_t level, const BlockKey& key, const BlockMeta& meta,
                                        EvictionMode mode) {
  EvictionPlan plan;
  plan.below = level + 1 < tiers_.size();
  plan.admitted = plan.below && AdmitBelow(level, key, meta);
  // kDropOnly waits for no copy: only a move into a write-through copy, an index change, is made.
  plan.may_demote = plan.admitted && (mode == EvictionMode::kDemote || HasCopyBelow(level, meta));
  return plan;
}

bool Store::DemoteOrDrop(size_t level, const BlockKey& key, const BlockMeta& meta,
                         EvictionMode mode) {
  const EvictionPlan plan = PlanEviction(level, key, meta, mode);
  std::optional<DemoteOutcome> outcome;
  if (plan.may_demote) outcome = Demote(level, key, meta);
  return SettleEviction(key, meta, plan, outcome);
}

bool Store::SettleEviction(const BlockKey& key, const BlockMeta& meta, const EvictionPlan& plan,
                           std::optional<DemoteOutcome> outcome) {
  TierCounters& counters = tier_counters_[static_cast<size_t>(meta.tier)];
  switch (outcome.value_or(DemoteOutcome::kNoRoomBelow)) {
    case DemoteOutcome::kMoved:
      counters.evictions.fetch_add(1);
      counters.demotions.fetch_add(1);
      return true;
    case DemoteOutcome::kBlockChanged:
      index_->Unpick(key);
      return false;
    case DemoteOutcome::kNoRoomBelow:
    case DemoteOutcome::kCopyFailed:
      // The next tier cannot take the block now (or was not asked to): dropping it still makes
      // room, which is what the put asked for; the block is a cache entry, not data of record.
      break;
  }
  std::optional<BlockMeta> gone = index_->EraseIf(key, [&](const BlockMeta& m) {
    return m.state == BlockState::kReady && m.lease_count == 0 && m.generation == meta.generation &&
           m.tier == meta.tier && m.pinned_until_us <= clock_.NowMicros();
  });
  if (!gone) {
    index_->Unpick(key);
    return false;
  }
  // The pressure it left under: the tier's fill with the victim still in it.
  tiers::TierStats fill;
  if (const tiers::Tier* t = tier(gone->tier)) fill = t->Stats();
  FreeExtent(*gone);
  counters.evictions.fetch_add(1);
  counters.drops.fetch_add(1);
  // Why it was dropped rather than moved down, counted once it really was.
  EvictionCause cause = EvictionCause::kLastTier;
  if (plan.below && !plan.admitted) {
    counters.admission_drops.fetch_add(1);
    cause = EvictionCause::kAdmissionRefused;
  } else if (plan.below && !plan.may_demote) {
    counters.lag_drops.fetch_add(1);
    cause = EvictionCause::kDiskLag;
  } else if (plan.below) {
    cause = EvictionCause::kNoRoomBelow;
  }
  RecordDeparture(key, *gone, DepartureReason::kEvicted, cause, &fill);
  if (options_.nvme_write_through && move_requests_.WriteThroughPending(gone->generation)) {
    // Its put still waits for the copy to NVMe, which can no longer be made: it must not hear
    // that the block is on NVMe.
    counters_.write_through_failures.fetch_add(1);
    move_requests_.FinishWriteThrough(gone->generation,
                                      Busy("the block left memory before its copy reached NVMe (" +
                                           std::string(EvictionCauseName(cause)) + ")"));
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

Store::DemoteOutcome Store::Demote(size_t level, const BlockKey& key, const BlockMeta& meta) {
  if (HasCopyBelow(level, meta)) return DemoteIntoShadow(level, key, meta);
  Result<PinnedMove> move = PrepareMove(level + 1, key, meta);
  if (!move.ok()) {
    const DemoteOutcome outcome = UnpreparedOutcome(move.status());
    // A GPU block whose copy on NVMe is further down than the next tier: when the host cannot
    // take it, it moves into that copy rather than being dropped (which frees the copy too, a
    // write-through one that its put was told is durable).
    if (outcome == DemoteOutcome::kNoRoomBelow && meta.has_shadow &&
        tier(TierId::kNvme) != nullptr) {
      return DemoteIntoShadow(level, key, meta);
    }
    return outcome;
  }
  MovePinnedBatch(level, level + 1, {&*move, 1});
  return MovedOutcome(move->status);
}

Store::DemoteOutcome Store::UnpreparedOutcome(const Status& prepared) {
  // kNotFound: the block changed since it was picked; anything else is the allocation's answer.
  return prepared.code() == StatusCode::kNotFound ? DemoteOutcome::kBlockChanged
                                                  : DemoteOutcome::kNoRoomBelow;
}

Store::DemoteOutcome Store::MovedOutcome(const Status& moved) {
  if (moved.ok()) return DemoteOutcome::kMoved;
  // Other than a device error, only the index refuses a move: leased or replaced meanwhile.
  return moved.code() == StatusCode::kDeviceError ? DemoteOutcome::kCopyFailed
                                                  : DemoteOutcome::kBlockChanged;
}

void Store::FreeExtent(const BlockMeta& meta) {
  if (tiers::Tier* t = tier(meta.tier)) t->Free(meta.extent);
  if (meta.has_shadow) {
    if (tiers::Tier* t = tier(TierId::kNvme)) t->Free(meta.shadow);
  }
}

bool Store::AdmitBelow(size_t level, const BlockKey& key, const BlockMeta& meta) {
  // Admission guards the SSD's write budget; moves between memory tiers are free to happen.
  if (tiers_[level + 1]->id() != TierId::kNvme) return true;
  // A write-through block's copy is already there, and durable: its move below writes nothing,
  // so neither admission nor a full tier refuses it (a refusal would drop the copy too).
  if (HasCopyBelow(level, meta)) return true;
  if (!admission_->Admit(meta)) return false;
  // A full last tier whose policy keeps its blocks (sticky, while it thrashes) does not take the
  // victim: writing it would only push out a block more likely to be read again.
  tiers::Tier& below = *tiers_[level + 1];
  if (!EvictionDrops(level + 1)) return true;
  if (below.Stats().free_bytes() >= meta.extent.length) return true;
  return LastTierAdmits(level + 1, key, meta.quota_group);
}

bool Store::LastTierAdmits(size_t level, const BlockKey& key, uint8_t group) {
  if (!EvictionDrops(level)) return true;
  const TierId tier = tiers_[level]->id();
  if (index_->AdmitsNew(tier, group)) return true;
  index_->NotAdmitted(tier, group, key);
  counters_.not_admitted_blocks.fetch_add(1);
  return false;
}

bool Store::EvictionDrops(size_t level) const {
  return level + 1 == tiers_.size() && !PublishesDrops(level);
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
  tier_counters_[static_cast<size_t>(meta.tier)].copy_demotions.fetch_add(1);
  RemoveIfNamespaceDropped(key, meta);
  return DemoteOutcome::kMoved;
}

size_t Store::EvictToTarget(TierId id, uint64_t target_used_bytes, size_t max_victims,
                            uint64_t max_bytes) {
  const size_t level = LevelOf(id);
  if (level >= tiers_.size()) return 0;
  std::atomic<uint64_t>& evicting = evicting_bytes_[static_cast<size_t>(id)];
  // The victims are picked together before any is moved: a run of blocks that were used together
  // (one request's prefix) goes down together, instead of interleaved with the victims other
  // threads pick meanwhile, which would leave every prefix with a gap. Bytes other threads have
  // picked and not moved yet count as gone, or every thread would evict down to the target.
  // The fill is read again for each victim, after the bytes leaving: a fill read once goes stale
  // when another thread settles its victims meanwhile (they stop counting as leaving, and the
  // stale fill still holds them), and this thread then evicted a second batch below the target.
  // Read in this order, a victim settled in between is subtracted twice, never kept: the loop
  // stops early at worst, and the next round goes on. (Stats takes the tier's allocation lock,
  // once per victim of at most a batch.)
  std::vector<std::pair<BlockKey, BlockMeta>> victims;
  const uint64_t now = clock_.NowMicros();
  uint64_t picked_bytes = 0;
  while (victims.size() < max_victims && (victims.empty() || picked_bytes < max_bytes)) {
    const uint64_t leaving = evicting.load(std::memory_order_acquire);
    const uint64_t used = tiers_[level]->Stats().used_bytes;
    if (used <= leaving || used - leaving <= target_used_bytes) break;
    std::optional<std::pair<BlockKey, BlockMeta>> victim = index_->PickVictim(id, now);
    if (!victim) break;  // nothing evictable: everything is leased, pinned or writing
    evicting.fetch_add(victim->second.extent.length, std::memory_order_relaxed);
    picked_bytes += victim->second.extent.length;
    victims.push_back(*std::move(victim));
  }
  DemoteVictims(level, victims);
  return victims.size();
}

void Store::DemoteVictims(size_t level, std::span<const std::pair<BlockKey, BlockMeta>> victims) {
  std::atomic<uint64_t>& evicting = evicting_bytes_[static_cast<size_t>(tiers_[level]->id())];
  // Each victim ends here: its bytes stop counting as leaving, and a put waiting for room hears
  // of it at once (not after the whole batch) when it made room.
  auto settled = [&](const BlockMeta& meta, bool made_room) {
    evicting.fetch_sub(meta.extent.length, std::memory_order_release);
    if (made_room) move_requests_.NotifyMoved();
  };
  // The victims that need their bytes copied down go to the tier below together, as one batch:
  // the device sees them all at once instead of one per mover thread.
  std::vector<PinnedMove> batch;
  std::vector<EvictionPlan> plans;
  // From the last local tier, every victim is a drop: with a remote tier below, it goes there
  // first, the whole round as one batch.
  // A victim that could not be pinned for its publish (leased since it was picked) stays: it was
  // not published, and its lease may end before the drop below.
  std::vector<BlockKey> unpublished;
  if (PublishesDrops(level)) unpublished = PublishToRemote(level, victims);
  if (level + 1 < tiers_.size() && PublishesDrops(level + 1)) {
    MakeRoomBelowByPublishing(level, victims);
  }
  for (const auto& [key, meta] : victims) {
    if (std::find(unpublished.begin(), unpublished.end(), key) != unpublished.end()) {
      settled(meta, SettleEviction(key, meta, EvictionPlan{}, DemoteOutcome::kBlockChanged));
      continue;
    }
    const EvictionPlan plan = PlanEviction(level, key, meta, EvictionMode::kDemote);
    if (!plan.may_demote || HasCopyBelow(level, meta)) {  // a drop, or an index change
      std::optional<DemoteOutcome> outcome;
      if (plan.may_demote) outcome = DemoteIntoShadow(level, key, meta);
      settled(meta, SettleEviction(key, meta, plan, outcome));
      continue;
    }
    Result<PinnedMove> move = PrepareMove(level + 1, key, meta);
    if (!move.ok()) {
      settled(meta, SettleEviction(key, meta, plan, UnpreparedOutcome(move.status())));
      continue;
    }
    batch.push_back(*std::move(move));
    plans.push_back(plan);
  }
  if (batch.empty()) return;
  MovePinnedBatch(level, level + 1, batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    const PinnedMove& m = batch[i];
    settled(m.meta, SettleEviction(m.key, m.meta, plans[i], MovedOutcome(m.status)));
  }
}

}  // namespace kvtier::store
