// The store's block moves between tiers: pinning a block so nobody frees it mid-copy, room in the
// destination, the copy (a batch of blocks at once when a device is involved, so the device's
// queue is kept full), and repointing the index. Demotion, promotion, fetches for readers and the
// clean-stop flush are all built on these.
#include <vector>

#include "common/stream_copy.h"
#include "daemon/store/store.h"

namespace kvtier::store {

using index::BlockMeta;
using index::BlockState;

bool Store::PinForMove(const BlockKey& key, const BlockMeta& meta) {
  // A lease the store holds itself: without it a Remove could free the extent mid-copy and a new
  // put could write into it while we read. The extent is compared too: a block moved up and back
  // down since `meta` was read keeps its generation and tier but not its extent, and the old one
  // may already hold another block. The shadow too: a write-through copy attached since the
  // block was picked would be forgotten by a move that decides from `meta` (its NVMe extent and
  // record left behind).
  Status pinned = index_->Update(key, [&](BlockMeta& m) {
    if (!m.SameIncarnationAs(meta) || m.lease_count != 0) {
      return NotFound("block changed since it was picked");
    }
    m.lease_count = 1;
    return Status::Ok();
  });
  return pinned.ok();
}

void Store::UnpinAfterMove(const BlockKey& key) {
  std::optional<BlockMeta> meta;
  (void)index_->Update(key, [&](BlockMeta& m) {
    --m.lease_count;
    meta = m;
    return Status::Ok();
  });
  if (meta) RemoveIfNamespaceDropped(key, *meta);
}

Result<Store::PinnedMove> Store::PrepareMove(size_t to_level, const BlockKey& key,
                                             const BlockMeta& meta, EvictionMode mode) {
  if (!PinForMove(key, meta)) return NotFound("block changed since it was picked");
  // Room below is made under the moved block's own quota group: a tenant's demotions evict its
  // own blocks there first when it is over its quota, and never another's within theirs.
  Result<Extent> dst =
      AllocateWithEviction(to_level, meta.extent.length, mode, meta.quota_group);
  if (!dst.ok()) {
    UnpinAfterMove(key);
    return dst.status();
  }
  return PinnedMove{key, meta, *dst, {}};
}

Status Store::MovePinned(size_t level, size_t to_level, const BlockKey& key, const BlockMeta& meta,
                         const Extent& dst) {
  PinnedMove move{key, meta, dst, {}};
  MovePinnedBatch(level, to_level, {&move, 1});
  return move.status;
}

void Store::MovePinnedBatch(size_t level, size_t to_level, std::span<PinnedMove> moves) {
  tiers::Tier& from = *tiers_[level];
  tiers::Tier& to = *tiers_[to_level];
  const MoveStats::Clock::time_point started = move_stats_.Start();
  CopyBatch(from, to, moves);
  for (PinnedMove& move : moves) {
    move.status = FinishMove(from, to, move);
    if (!move.status.ok()) continue;
    // A block of a batch took as long as the batch's copy: it waited for all of it.
    move_stats_.RecordMove(from.id(), to.id(), move.meta.extent.length, started);
  }
}

Status Store::FinishMove(tiers::Tier& from, tiers::Tier& to, const PinnedMove& move) {
  const bool keep_copy = KeepsCopyOnNvme(from, to, move.meta);
  Status st = move.status;
  if (st.ok()) st = MoveInIndex(move.key, move.meta, to.id(), move.dst, keep_copy);
  if (st.ok()) {
    if (!keep_copy) from.Free(move.meta.extent);
    return st;
  }
  to.Free(move.dst);
  UnpinAfterMove(move.key);
  if (st.code() == StatusCode::kDeviceError) CountCopyError(from, to);
  return st;
}

bool Store::KeepsCopyOnNvme(const tiers::Tier& from, const tiers::Tier& to,
                            const BlockMeta& meta) const {
  if (from.id() != TierId::kNvme || to.id() == TierId::kNvme) return false;
  // With write-through the copy is what makes the acknowledged put survive a crash: always kept.
  if (options_.nvme_write_through) return true;
  // Otherwise it only saves the write of the next demotion, within its share of the tier (read
  // and added apart: concurrent promotions may pass the share by a block each).
  return index_->shadow_bytes() + from.FootprintOf(meta.extent.length) <= nvme_copy_room_;
}

// Sets each move's status to its copy's. Blocks going between memory and a device go to the
// device as one batch (Tier::WriteBlocks / ReadBlocks); the rest one at a time.
void Store::CopyBatch(tiers::Tier& from, tiers::Tier& to, std::span<PinnedMove> moves,
                      bool must_survive_restart) {
  // Per thread: the mover's threads allocate nothing per batch once warm.
  thread_local std::vector<tiers::BlockWrite> writes;
  thread_local std::vector<tiers::BlockRead> reads;
  thread_local std::vector<PinnedMove*> written, read;
  writes.clear();
  reads.clear();
  written.clear();
  read.clear();
  for (PinnedMove& m : moves) {
    std::byte* src = from.Address(m.meta.extent);
    std::byte* dst = to.Address(m.dst);
    const uint64_t bytes = m.meta.extent.length;
    if (src != nullptr && dst == nullptr) {
      writes.push_back({m.dst, {m.meta.ns, m.key}, {src, bytes}, {}, must_survive_restart});
      written.push_back(&m);
    } else if (dst != nullptr && src == nullptr) {
      reads.push_back({m.meta.extent, {m.meta.ns, m.key}, {dst, bytes}, {}});
      read.push_back(&m);
    } else {
      m.status = CopyBetweenTiers(from, m.meta.extent, to, m.dst, {m.meta.ns, m.key});
    }
  }
  if (!writes.empty()) to.WriteBlocks(writes);
  if (!reads.empty()) from.ReadBlocks(reads);
  for (size_t i = 0; i < writes.size(); ++i) written[i]->status = writes[i].status;
  for (size_t i = 0; i < reads.size(); ++i) read[i]->status = reads[i].status;
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
  Status moved = index_->MoveTier(key, meta, to, dst, /*mover_pins=*/1, shadow);
  if (moved.ok()) RemoveIfNamespaceDropped(key, meta);
  return moved;
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

}  // namespace kvtier::store
