// The store's clean-stop path: writing the memory tiers' blocks into NVMe so that a restart serves
// them again (FlushToNvme).
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "daemon/store/store.h"

namespace kvtier::store {
namespace {

// NVMe victims a clean-stop flush publishes per round trip above a remote tier.
constexpr uint64_t kFlushPublishBatch = 8;

Status NoRoom() { return Busy("nvme tier has no room for this block without a newer one's"); }

}  // namespace

using index::BlockMeta;

std::vector<std::pair<BlockKey, BlockMeta>> Store::TakeNewestFirst(TierId id) {
  // The policy hands out its victims oldest first; taking them all out (pins ignored: a pin only
  // keeps a block from being dropped, and a flush keeps it) and reversing gives newest first.
  // Blocks not flushed are put back with Unpick.
  constexpr uint64_t kIgnorePins = std::numeric_limits<uint64_t>::max();
  std::vector<std::pair<BlockKey, BlockMeta>> blocks;
  // Every block, of every quota group (with quotas, the groups' orders are taken one after
  // another, so newest first holds within each).
  while (auto victim = index_->PickVictim(id, kIgnorePins, index::kEveryGroup)) {
    blocks.push_back(std::move(*victim));
  }
  std::reverse(blocks.begin(), blocks.end());
  return blocks;
}

Store::FlushResult Store::FlushToNvme(uint64_t deadline_us, std::stop_token stop) {
  FlushResult result;
  const size_t nvme = LevelOf(TierId::kNvme);
  if (nvme >= tiers_.size()) return result;
  FlushState flush{{}, deadline_us, std::move(stop), 0, {}};
  std::vector<Extent> written_newest_first;
  // The GPU tier first: its blocks were promoted for being read, the hottest of all.
  std::vector<std::pair<size_t, std::vector<std::pair<BlockKey, BlockMeta>>>> memory;
  for (size_t level = 0; level < nvme; ++level) {
    memory.emplace_back(level, TakeNewestFirst(tiers_[level]->id()));
    for (const auto& [key, meta] : memory.back().second) {
      flush.unflushed_bytes += meta.extent.length;
      if (meta.has_shadow) flush.with_copies.emplace_back(key, meta);
    }
  }
  for (const auto& [level, blocks] : memory) {
    for (const auto& [key, picked] : blocks) {
      flush.unflushed_bytes -= picked.extent.length;
      // A block whose copy gave way to an earlier block's room (DropLastCopies, or the reclaim
      // window of an allocation) is written like the others, where it still lies where it was
      // picked.
      BlockMeta meta = picked;
      if (meta.has_shadow) {
        if (std::optional<BlockMeta> now = index_->Get(key);
            now && !now->has_shadow && now->SamePlaceAs(meta)) {
          meta = *now;
        }
      }
      // NVMe full of blocks this flush wrote does not end it: a later, smaller block may still fit
      // the room that is left.
      // A block with its copy on NVMe moves into it: it needs no room.
      if (OutOfTime(flush) || (flush.nothing_older_left && !meta.has_shadow &&
                               !FitsFreeSpace(meta.extent.length))) {
        index_->Unpick(key);
        ++result.left;
        continue;
      }
      Extent on_nvme;
      const FlushOutcome outcome = FlushBlock(level, key, meta, flush, on_nvme);
      if (outcome == FlushOutcome::kNvmeFull || outcome == FlushOutcome::kNotMoved) {
        result.nvme_full |= outcome == FlushOutcome::kNvmeFull;
        index_->Unpick(key);
        ++result.left;
        continue;
      }
      if (outcome == FlushOutcome::kWritten) {
        ++result.written;
        result.written_bytes += meta.extent.length;
      } else {
        ++result.already_durable;
      }
      flush.flushed.insert(meta.generation);
      written_newest_first.push_back(on_nvme);
    }
  }
  for (const BlockKey& key : flush.set_aside) index_->Unpick(key);
  // Written newest first, so each block's record says it was used before the older ones. Marked
  // used again oldest first, the records order them as they were in memory, and the restart
  // adopts them in that order (the newest as the most recently used).
  tiers::Tier& nvme_tier = *tiers_[nvme];
  for (auto it = written_newest_first.rbegin(); it != written_newest_first.rend(); ++it) {
    nvme_tier.RecordUse(*it);
  }
  return result;
}

bool Store::FitsFreeSpace(uint64_t bytes) const {
  const tiers::Tier& t = *tiers_[LevelOf(TierId::kNvme)];
  return t.Stats().free_bytes() >= t.FootprintOf(bytes);
}

bool Store::OutOfTime(const FlushState& flush) const {
  return flush.stop.stop_requested() ||
         (flush.deadline_us != 0 && clock_.NowMicros() >= flush.deadline_us);
}

Store::FlushOutcome Store::FlushBlock(size_t level, const BlockKey& key, const BlockMeta& meta,
                                      FlushState& flush, Extent& on_nvme) {
  TierCounters& counters = tier_counters_[static_cast<size_t>(meta.tier)];
  if (meta.has_shadow) {
    if (DemoteIntoShadow(level, key, meta) != DemoteOutcome::kMoved) return FlushOutcome::kNotMoved;
    counters.demotions.fetch_add(1);
    on_nvme = meta.shadow;
    flush.flushed_reserved_bytes += tiers_[LevelOf(TierId::kNvme)]->FootprintOf(meta.shadow.length);
    return FlushOutcome::kAlreadyDurable;
  }
  if (!PinForMove(key, meta)) return FlushOutcome::kNotMoved;
  Result<Extent> dst = AllocateForFlush(meta.extent.length, flush);
  if (!dst.ok()) {
    UnpinAfterMove(key);
    // kBusy: NVMe has no room for this block and cannot be given any without dropping a block
    // newer than it (one this flush wrote); any other error (a block larger than NVMe, the time
    // ran out, a device error) is this block's alone.
    return dst.status().code() == StatusCode::kBusy ? FlushOutcome::kNvmeFull
                                                    : FlushOutcome::kNotMoved;
  }
  if (!MovePinned(level, LevelOf(TierId::kNvme), key, meta, *dst).ok()) {
    return FlushOutcome::kNotMoved;
  }
  flush.flushed_reserved_bytes += tiers_[LevelOf(TierId::kNvme)]->FootprintOf(meta.extent.length);
  counters.demotions.fetch_add(1);
  on_nvme = *dst;
  return FlushOutcome::kWritten;
}

bool Store::DropLastCopies(uint64_t enough_bytes, FlushState& flush) {
  tiers::Tier& nvme = *tiers_[LevelOf(TierId::kNvme)];
  uint64_t freed = 0;
  while (freed < enough_bytes && !flush.with_copies.empty()) {
    const auto [key, meta] = flush.with_copies.back();
    flush.with_copies.pop_back();
    // Gone already: moved into it by this flush, or removed.
    if (!DropCopyOf(nvme, key, meta)) continue;
    freed += nvme.FootprintOf(meta.shadow.length);
  }
  return freed > 0;
}

bool Store::NoRoomCanBeMade(uint64_t bytes, const FlushState& flush) const {
  // In the tier's own bytes (NVMe: with the record header): measured against the payload, a block
  // that needs a little more than the room left would drop every older block and still not fit.
  // Where nvme.paths splits the tier into files, an extent must fit within one of them: the
  // capacity here overstates the room, and such a block may still drop older ones for nothing.
  const tiers::Tier& t = *tiers_[LevelOf(TierId::kNvme)];
  const uint64_t capacity = t.Stats().capacity_bytes;
  return capacity - std::min(capacity, flush.flushed_reserved_bytes) < t.FootprintOf(bytes);
}

Result<Extent> Store::AllocateForFlush(uint64_t bytes, FlushState& flush) {
  const size_t nvme = LevelOf(TierId::kNvme);
  tiers::Tier& t = *tiers_[nvme];
  // Above a remote tier the victims are published before they are dropped (the remote client
  // outlives the flush), a batch per round trip: room for up to kFlushPublishBatch blocks like
  // this one, never more than the flush still has to write. Otherwise one victim at a time, so
  // that no NVMe block goes for room the flush does not use.
  const bool publishes = PublishesDrops(nvme);
  const size_t max_victims = publishes ? kFlushPublishBatch : 1;
  const uint64_t want =
      publishes ? std::min(bytes + flush.unflushed_bytes, kFlushPublishBatch * bytes) : bytes;
  // Not max_evictions_per_allocation: that bounds a put racing other threads for freed space,
  // and a block 257 times the size of the NVMe blocks around it (2 MiB among 4 KiB values, each
  // with its 4 KiB header) needs more victims than that even when they lie side by side, more
  // still where they are scattered. The flush runs alone, and every victim leaves NVMe or is set
  // aside, so the loop ends once every block older than this one was looked at; the bound only
  // guards against victims that come back (leased since they were picked).
  const uint64_t max_picks = t.Stats().block_count + 1;
  std::vector<std::pair<BlockKey, BlockMeta>> victims;
  for (uint64_t picks = 0; picks <= max_picks;) {
    Result<Extent> extent = t.Allocate(bytes);
    if (extent.ok() || extent.status().code() != StatusCode::kBusy) return extent;
    // Nothing older is left, or the blocks this flush wrote leave too little room for this one
    // whatever is dropped: the older blocks stay rather than go for room no block can use.
    if (flush.nothing_older_left || NoRoomCanBeMade(bytes, flush)) return NoRoom();
    victims.clear();
    uint64_t picked = 0;
    while (picked < want && victims.size() < max_victims) {
      std::optional<std::pair<BlockKey, BlockMeta>> victim =
          index_->PickVictim(TierId::kNvme, clock_.NowMicros());
      if (!victim) break;
      // Flushed blocks entered NVMe as its most recently used. Under recency order, once one is
      // the victim every block older than the flush is gone, and the ones after it are the
      // flush's too; a policy that evicts new blocks before older ones it saw reused (s3fifo's
      // small queue) offers them first. Either way it is set aside and the next one looked at,
      // until no block is left: each of them once per flush.
      if (flush.flushed.contains(victim->second.generation)) {
        flush.set_aside.push_back(victim->first);
        continue;
      }
      picked += victim->second.extent.length;
      victims.push_back(*std::move(victim));
    }
    if (victims.empty()) {
      // Copies on NVMe of memory blocks not flushed yet (kept from reads up) are the last room:
      // their blocks come later in the flush's order, and are written if room is left then.
      if (DropLastCopies(t.FootprintOf(bytes), flush)) continue;
      flush.nothing_older_left = true;
      return NoRoom();
    }
    picks += victims.size();
    // A stop that runs out of time keeps its NVMe blocks (each publish may wait for
    // remote.timeout_ms; above no remote tier, a block may need thousands of victims).
    if (OutOfTime(flush)) {
      for (const auto& [key, meta] : victims) index_->Unpick(key);
      return Timeout("the flush ran out of time");
    }
    DropPickedVictims(nvme, victims, EvictionMode::kDemote);
  }
  // Not kBusy: older blocks are left, and the next block may still make its room.
  return Rejected("nvme victims kept coming back; this block stays");
}

}  // namespace kvtier::store
