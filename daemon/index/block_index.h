// BlockIndex: the map from BlockKey to block metadata, with one eviction order per tier.
//
// The map is split into shards by key, each under its own mutex, so lookups from many connections
// proceed in parallel. Each tier's EvictionPolicy sits under a separate per-tier mutex. Lock order:
// a shard mutex may be held while taking a policy mutex, never the reverse; no two shard mutexes
// are ever held at once. The index holds metadata only: extents are allocated and freed by the
// store, which calls the index to publish and retire them.
//
// Entry life cycle: InsertWriting (state kWriting: invisible to Lookup, in no policy) ->
// MarkReady (kReady: visible, tracked by its tier's policy) -> Erase or EvictOne. An entry with a
// non-zero lease count, or pinned until a later time, is never chosen by EvictOne.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/keys.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/types.h"
#include "daemon/index/eviction_policy.h"

namespace kvtier::index {

enum class BlockState : uint8_t { kWriting, kReady };

struct BlockMeta {
  NamespaceId ns;
  Extent extent;                 // where the bytes live in `tier`; length = block size in bytes
  uint64_t checksum = 0;         // XXH3-64 of the payload, valid when has_checksum
  uint64_t pinned_until_us = 0;  // not evictable before this time (0: not pinned)
  // Names this incarnation of the key: a key removed and stored again gets a new generation, so a
  // mover that copied the old bytes can tell that the block changed under it even when the new
  // incarnation landed at the same extent. Set by the store; the index only compares it.
  uint64_t generation = 0;
  // A copy of a memory block (host, or GPU after a promotion) already written to NVMe
  // (write-through): its demotion to NVMe needs no write, and it survives a restart. Freed with
  // the block; MoveTier keeps it on a move between memory tiers and drops it otherwise (the block
  // then lives in the shadow's place or a new one).
  Extent shadow;
  bool has_shadow = false;
  // The read window of the GPU promotion policy (placement/gpu_promotion_policy.h): leases of
  // the block since window_start_us. Apart from `reads`, which counts lookups too, never restarts
  // and serves NVMe admission.
  uint64_t window_start_us = 0;
  uint32_t lease_count = 0;  // readers copying out; not evictable while > 0
  uint8_t reads = 0;         // lookups and leases that found it, saturating (NVMe admission)
  uint8_t window_reads = 0;  // saturating
  TierId tier = TierId::kHost;
  BlockState state = BlockState::kWriting;
  bool has_checksum = false;
};

struct LookupResult {
  // Number of leading keys that are ready. Keys after the first miss are not counted even if
  // present: a block is only useful together with its whole prefix.
  size_t ready_prefix = 0;
  // The tier of each of the first `ready_prefix` keys.
  std::vector<TierId> tiers;
};

class BlockIndex {
 public:
  struct Options {
    size_t shard_count = 64;
    std::string policy = "lru";       // see EvictionPolicyNames()
    size_t capacity_hint_blocks = 0;  // passed to the policy (ghost history size)
    // Per tier (indexed by TierId), a policy other than `policy`; empty: `policy`.
    std::array<std::string, kTierCount> tier_policies{};
  };

  // kInvalidArgument for a zero shard count or an unknown policy name (of any tier).
  static Result<std::unique_ptr<BlockIndex>> Create(const Options& options);

  // Counts the ready prefix of `keys`. With `touch`, records a use of every block of that prefix,
  // from the last to the first, so that a prefix's head ends up more recent than its tail. With
  // `ns`, a block of another namespace counts as absent (tenants cannot probe each other).
  // A long lookup checks its keys in windows of doubling size, taking each shard's lock once per
  // window; the keys of one window are not seen at one instant, as they were not one by one.
  LookupResult Lookup(std::span<const BlockKey> keys, bool touch,
                      const std::optional<NamespaceId>& ns = std::nullopt);

  // Adds `key` in state kWriting with `meta` (whose state is ignored). Errors: kRejected when the
  // key is held by another namespace; kAlreadyExists when the key is ready; kBusy when another
  // writer holds it in kWriting.
  Status InsertWriting(const BlockKey& key, const BlockMeta& meta);

  // kWriting -> kReady; the block joins its tier's policy as just used. kNotFound when absent,
  // kInvalidArgument when not in kWriting.
  Status MarkReady(const BlockKey& key);

  // Adds a ready entry in one step (trace simulation, warm restart). kAlreadyExists when present.
  Status InsertReady(const BlockKey& key, const BlockMeta& meta);

  // Runs `fn(meta)` on the entry under its shard lock and returns its result; kNotFound when the
  // key is absent. `fn` must not call back into the index. Changing `tier` or `state` through
  // Update is not allowed (use MoveTier / MarkReady), because the policies would not follow.
  Status Update(const BlockKey& key, const std::function<Status(BlockMeta&)>& fn);

  // Copy of the entry, or nullopt.
  std::optional<BlockMeta> Get(const BlockKey& key) const;

  // Removes the entry in any state and returns it; nullopt when absent.
  std::optional<BlockMeta> Erase(const BlockKey& key);

  // Removes the entry only if `pred(meta)` holds (for example: ready and unleased).
  std::optional<BlockMeta> EraseIf(const BlockKey& key,
                                   const std::function<bool(const BlockMeta&)>& pred);

  // Moves the ready entry `from` (a snapshot taken before its bytes were copied) to (`tier`,
  // `extent`) (demotion, promotion): it leaves the old tier's policy and joins the new one as just
  // used. If the entry is no longer that incarnation in that place (removed and put again
  // meanwhile, even at the same extent) the copy may be stale, so the move is refused with
  // kNotFound. kBusy while the block is leased beyond the `mover_pins` leases the mover itself
  // holds (readers copy straight out of the old extent); those are given back with the move.
  // `shadow` says what becomes of the block's NVMe copy: kForget (the caller moved the block into
  // it or frees it), kKeep (a move between memory tiers, which leaves the copy right), or
  // kOldExtent (a write-through block read up from NVMe: the extent it leaves stays as its copy,
  // so that what was acknowledged as durable stays on disk).
  enum class ShadowAfterMove : uint8_t { kForget, kKeep, kOldExtent };
  Status MoveTier(const BlockKey& key, const BlockMeta& from, TierId tier, const Extent& extent,
                  uint32_t mover_pins = 0, ShadowAfterMove shadow = ShadowAfterMove::kForget);

  // The victim chosen by `tier`'s policy that is ready, unleased and unpinned at `now_us`,
  // together with its metadata. The entry stays in the map (the caller frees or demotes it and
  // then calls Erase or MoveTier) but leaves the policy, so no other thread picks it too; blocks
  // skipped because they are leased or pinned go back to the policy as just used. Gives up after
  // trying every block the policy held once; nullopt then, or when the tier is empty.
  std::optional<std::pair<BlockKey, BlockMeta>> PickVictim(TierId tier, uint64_t now_us);

  // Puts a block that PickVictim returned back into its tier's policy (the caller changed its
  // mind, for example because demotion failed and the block stays).
  void Unpick(const BlockKey& key);

  // Ready, unleased blocks of `tier` unpinned at `now_us` whose extent lies inside `range`: what
  // the store evicts to give a whole slab back. A full scan of the index, for a rare event.
  std::vector<std::pair<BlockKey, BlockMeta>> EvictableInRange(TierId tier, const Extent& range,
                                                               uint64_t now_us) const;

  // Keys of every entry (any state) of namespace `ns`.
  std::vector<BlockKey> KeysOfNamespace(const NamespaceId& ns) const;

  // Calls fn(key, meta) for every entry, one shard at a time under that shard's lock.
  void ForEach(const std::function<void(const BlockKey&, const BlockMeta&)>& fn) const;

  size_t size() const;                      // entries in any state
  size_t TrackedBlocks(TierId tier) const;  // blocks in `tier`'s policy
  std::string_view policy_name(TierId tier) const;

 private:
  struct Shard {
    mutable Mutex mu;
    std::unordered_map<BlockKey, BlockMeta, Key128Hash> entries GUARDED_BY(mu);
  };
  struct TierOrder {
    mutable Mutex mu;
    std::unique_ptr<EvictionPolicy> policy GUARDED_BY(mu);
  };

  struct LookupScratch;

  explicit BlockIndex(size_t shard_count);
  size_t ShardIndex(const BlockKey& key) const;
  Shard& ShardFor(const BlockKey& key) const;
  void GroupByShard(std::span<const BlockKey> window, LookupScratch& scratch) const;
  size_t ScanWindow(std::span<const BlockKey> keys, size_t begin, size_t end, bool touch,
                    const std::optional<NamespaceId>& ns, std::vector<TierId>& tiers,
                    LookupScratch& scratch);
  void UndoReads(std::span<const BlockKey> keys, size_t begin, size_t from, size_t end,
                 const LookupScratch& scratch);
  void TouchPrefix(std::span<const BlockKey> keys, const std::vector<TierId>& tiers);

  std::vector<std::unique_ptr<Shard>> shards_;
  std::array<TierOrder, kTierCount> tiers_;
};

}  // namespace kvtier::index
