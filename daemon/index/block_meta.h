// BlockMeta: what the index knows of one block (BlockIndex, BlockMap).
#pragma once

#include <cstdint>

#include "common/keys.h"
#include "common/types.h"

namespace kvtier::index {

enum class BlockState : uint8_t { kWriting, kReady };

struct BlockMeta {
  // The fields a lookup reads come first: with the key before them (BlockMap's entry) they are
  // its first 46 bytes, in one cache line or two, where they were spread over two or three.
  NamespaceId ns;
  // Names this incarnation of the key: a key removed and stored again gets a new generation, so a
  // mover that copied the old bytes can tell that the block changed under it even when the new
  // incarnation landed at the same extent. Set by the store; the index only compares it.
  uint64_t generation = 0;
  uint8_t reads = 0;         // lookups and leases that found it, saturating (NVMe admission)
  uint8_t window_reads = 0;  // saturating
  // The quota group of the block's namespace (1 .. kMaxQuotaGroups - 1; 0: none), set by the
  // store when the block is written and changed only by BlockIndex::AssignQuotaGroups.
  uint8_t quota_group = 0;
  TierId tier = TierId::kHost;
  BlockState state = BlockState::kWriting;
  // Its namespace was dropped while it was leased or being moved: found by no lookup, lease or
  // put of that namespace any more (registered again or not), and removed when the lease or move
  // ends (Store::RemoveIfNamespaceDropped).
  bool dropped = false;
  bool has_checksum = false;
  bool has_shadow = false;   // `shadow` below holds a copy
  uint32_t lease_count = 0;  // readers copying out; not evictable while > 0
  // When this block was last written through to the remote tier, in seconds of the store's clock
  // plus one (0: never): a drop soon after needs no second copy (Store::PublishToRemote).
  uint32_t remote_copy_s = 0;
  Extent extent;                 // where the bytes live in `tier`; length = block size in bytes
  uint64_t checksum = 0;         // XXH3-64 of the payload, valid when has_checksum
  uint64_t pinned_until_us = 0;  // not evictable before this time (0: not pinned)
  // A copy of a memory block (host, or GPU after a promotion) already on NVMe (written through,
  // or left there when the block was read up): its demotion to NVMe needs no write, and it
  // survives a restart. Freed with the block; MoveTier keeps it on a move between memory tiers
  // and drops it otherwise (the block then lives in the shadow's place or a new one).
  Extent shadow;
  // The read window of the GPU promotion policy (placement/gpu_promotion_policy.h): leases of
  // the block since window_start_us. Apart from `reads`, which counts lookups too, never restarts
  // and serves NVMe admission.
  uint64_t window_start_us = 0;

  // Whether a lookup, lease or pin of namespace `in` may find this block: ready, of that
  // namespace, and not left behind by a drop of it. (The index's lookups, the store's leases,
  // pins and holds all ask this.)
  bool VisibleIn(const NamespaceId& in) const {
    return state == BlockState::kReady && !dropped && ns == in;
  }

  // Whether this block is still, ready and in the same place, the incarnation `picked` (a copy
  // taken earlier) describes: same generation, tier, extent and write-through copy. A mover that
  // decided from `picked` may act only while this holds; a field that a move decides from belongs
  // here, so that every such check sees it.
  bool SameIncarnationAs(const BlockMeta& picked) const {
    return SamePlaceAs(picked) && has_shadow == picked.has_shadow &&
           (!has_shadow || shadow == picked.shadow);
  }
  // The same, whatever became of its copy on NVMe (one may have been dropped since `picked`).
  bool SamePlaceAs(const BlockMeta& picked) const {
    return state == BlockState::kReady && generation == picked.generation && tier == picked.tier &&
           extent == picked.extent;
  }
};
static_assert(sizeof(BlockMeta) == 96, "BlockMeta is most of the index's memory per block");

}  // namespace kvtier::index
