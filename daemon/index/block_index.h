// BlockIndex: the map from BlockKey to block metadata, with one eviction order per tier.
//
// The map is split into shards by key, each under its own mutex, so lookups from many connections
// proceed in parallel. Each tier's EvictionPolicy sits under a separate per-tier mutex. Lock order:
// a shard mutex may be held while taking a policy mutex, never the reverse; no two shard mutexes
// are ever held at once. The index holds metadata only: extents are allocated and freed by the
// store, which calls the index to publish and retire them.
//
// Quota groups: the blocks of a group (a tenant's or a namespace's, daemon/store/quota_table.h)
// that has a byte quota in a tier have an eviction order of their own there, and the bytes every
// group holds in each tier are counted. PickVictim takes its victims first from groups over their
// quota, then from the blocks of no quota, and from a group within its quota only when that group
// asked for the room itself: a tenant within its quota is never evicted by another's pressure.
// A quota is a guaranteed share, not a cap: a group may hold more while the tier has room.
//
// Entry life cycle: InsertWriting (state kWriting: invisible to Lookup, in no policy) ->
// MarkReady (kReady: visible, tracked by its tier's policy) -> Erase or EvictOne. An entry with a
// non-zero lease count, or pinned until a later time, is never chosen by EvictOne.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
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
#include "daemon/index/block_map.h"
#include "daemon/index/block_meta.h"
#include "daemon/index/eviction_policy.h"

namespace kvtier::index {

struct LookupResult {
  // Number of leading keys that are ready. Keys after the first miss are not counted even if
  // present: a block is only useful together with its whole prefix.
  size_t ready_prefix = 0;
  // The tier of each of the first `ready_prefix` keys.
  std::vector<TierId> tiers;
};

// Group ids are 1 .. kMaxQuotaGroups - 1; 0 is "no quota group".
inline constexpr size_t kMaxQuotaGroups = 64;
// PickVictim's requester that may take any block, quotas or not (a flush that empties a tier).
inline constexpr uint8_t kEveryGroup = 0xff;

class BlockIndex {
 public:
  struct Options {
    size_t shard_count = 64;
    std::string policy{kDefaultEvictionPolicy};  // see EvictionPolicyNames()
    size_t capacity_hint_blocks = 0;             // passed to the policy (ghost history size)
    // Per tier (indexed by TierId), a policy other than `policy`; empty: `policy`.
    std::array<std::string, kTierCount> tier_policies{};
    PolicyClock policy_clock;  // the time of policies that learn from it; empty: steady clock
    // The room an NVMe copy of `bytes` takes there (Tier::FootprintOf of the NVMe tier: record
    // header, 4 KiB rounding), which shadow_bytes adds up; empty: the bytes themselves. Called
    // under a shard lock: it must not call back into the index.
    std::function<uint64_t(uint64_t)> shadow_footprint;
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
  // Puts the ready prefix of `keys` back in the order a touching Lookup leaves it (head most
  // recent), through EvictionPolicy::Refresh: not a use, so no read is counted and no policy
  // learns from it. Returns the prefix's length.
  size_t Refresh(std::span<const BlockKey> keys, const std::optional<NamespaceId>& ns);

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
  // skipped because they are leased or pinned go back to the policy (EvictionPolicy::PutBack)
  // when the search ends, each tried once. Gives up after trying every block the policy held;
  // nullopt then, or when the tier is empty.
  // With quotas: `requester` is the quota group whose put needs the room (0: none, as for the
  // mover's watermarks). Victims come from groups over their quota in `tier` (the requester's
  // own first), then from blocks of no quota there, then, only for a requester, from its own
  // blocks; blocks of other groups within their quota are never picked (unless the requester is
  // kEveryGroup).
  std::optional<std::pair<BlockKey, BlockMeta>> PickVictim(TierId tier, uint64_t now_us,
                                                           uint8_t requester = 0);

  // Sets quota group `group`'s quota in `tier` (0: none). Setting or clearing it moves the group's
  // blocks there between its own eviction order and the common one (in scan order, their
  // recency within the group forgotten): a full scan, for an operator's rare change.
  // kInvalidArgument for group 0 or past kMaxQuotaGroups.
  Status SetGroupQuota(uint8_t group, TierId tier, uint64_t quota_bytes);

  // Puts every block of each namespace in `groups` into the quota group it maps to (0: none),
  // with its bytes and its place in the eviction orders. One full scan, however many namespaces.
  using QuotaGroups = std::unordered_map<NamespaceId, uint8_t, Key128Hash>;
  void AssignQuotaGroups(const QuotaGroups& groups);

  struct GroupUsage {
    uint64_t used_bytes = 0;   // ready blocks of the group in the tier
    uint64_t quota_bytes = 0;  // 0: none
  };
  GroupUsage QuotaUsage(uint8_t group, TierId tier) const;

  // Puts a block that PickVictim returned back into its tier's policy (the caller changed its
  // mind, for example because demotion failed and the block stays), as a put-back victim, not a
  // use (EvictionPolicy::PutBack).
  void Unpick(const BlockKey& key);

  // Ready, unleased blocks of `tier` unpinned at `now_us` whose extent starts inside `range` (a
  // Tier::ReclaimUnit): what the store evicts to give a whole slab back, or to free a contiguous
  // range on NVMe. A full scan of the index, for a rare event.
  std::vector<std::pair<BlockKey, BlockMeta>> EvictableInRange(TierId tier, const Extent& range,
                                                               uint64_t now_us) const;
  // The same among `keys` only (the blocks the tier says start in `range`): a lookup each.
  std::vector<std::pair<BlockKey, BlockMeta>> EvictableInRange(TierId tier, const Extent& range,
                                                               std::span<const BlockKey> keys,
                                                               uint64_t now_us) const;

  // Keys of every entry (any state) of namespace `ns`.
  std::vector<BlockKey> KeysOfNamespace(const NamespaceId& ns) const;

  // Calls fn(key, meta) for every entry, one shard at a time under that shard's lock.
  void ForEach(const std::function<void(const BlockKey&, const BlockMeta&)>& fn) const;

  size_t size() const;                      // entries in any state
  size_t TrackedBlocks(TierId tier) const;  // blocks in `tier`'s policy
  // Room on NVMe held by the copies of blocks that live in memory (BlockMeta::shadow; each copy's
  // Options::shadow_footprint), counted as each entry gains or loses one: what the store bounds
  // when it keeps a copy it may let go.
  uint64_t shadow_bytes() const { return shadow_bytes_.load(std::memory_order_relaxed); }
  // Entries by state, and the ready ones with such a copy, counted as entries change: statistics
  // (/metrics, /stats, the history sampler) read them often, and a walk of the index held each
  // shard's lock for a pass over all its entries, which lookups of that shard waited out.
  struct EntryCounts {
    uint64_t ready = 0;
    uint64_t writing = 0;
    uint64_t shadowed = 0;
  };
  EntryCounts entry_counts() const;

  // Whether a new block of quota `group` may push a resident of full `tier` out now
  // (EvictionPolicy::AdmitsNew); when not, the caller does not store it and calls NotAdmitted.
  bool AdmitsNew(TierId tier, uint8_t group);
  void NotAdmitted(TierId tier, uint8_t group, const BlockKey& key);
  std::string_view policy_name(TierId tier) const;

 private:
  // PutBack of a picked block into its tier's order, if it is still ready there (in `tier`, when
  // given).
  void ReturnToPolicy(const BlockKey& key, std::optional<TierId> tier);

  struct Shard {
    mutable Mutex mu;
    BlockMap entries GUARDED_BY(mu);
  };
  struct TierOrder {
    mutable Mutex mu;
    // Blocks of no quota group, and of groups without a quota in this tier.
    std::unique_ptr<EvictionPolicy> policy GUARDED_BY(mu);
    // Per quota group with a quota here (quota_bytes > 0): its own order. A group whose quota was
    // just cleared keeps its order until SetGroupQuota has moved its blocks out.
    std::array<std::unique_ptr<EvictionPolicy>, kMaxQuotaGroups> group_policies GUARDED_BY(mu);
    std::array<uint64_t, kMaxQuotaGroups> quota_bytes GUARDED_BY(mu){};
    // Bytes of ready blocks per group in this tier ([0]: blocks of no group).
    std::array<uint64_t, kMaxQuotaGroups> used_bytes GUARDED_BY(mu){};
    size_t groups_with_quota GUARDED_BY(mu) = 0;
    std::string policy_name;   // set once at Create, for the groups' own orders
    PolicyClock policy_clock;  // likewise
    size_t capacity_hint_blocks = 0;

    // The order a block of `group` belongs to in this tier now.
    EvictionPolicy& OrderOf(uint8_t group) REQUIRES(mu) {
      return group != 0 && quota_bytes[group] != 0 ? *group_policies[group] : *policy;
    }
    // A ready block enters or leaves the tier: its order and the group's bytes follow. Leave
    // erases it from the common order too (a no-op unless it was moved while its group's quota
    // changed), so that no stale entry survives there.
    void Join(const BlockKey& key, const BlockMeta& meta) REQUIRES(mu);
    void Leave(const BlockKey& key, const BlockMeta& meta) REQUIRES(mu);
    // The order PickVictim takes its next candidate from (an empty group order is passed
    // over); nullptr when none may give one.
    EvictionPolicy* VictimOrder(uint8_t requester) REQUIRES(mu);
    // Whether group g holds more than its quota here and has a block to give.
    bool OverQuota(size_t g) const REQUIRES(mu) {
      return quota_bytes[g] != 0 && used_bytes[g] > quota_bytes[g] && group_policies[g]->size() > 0;
    }
    size_t TrackedBlocks() const REQUIRES(mu);
  };

  struct LookupScratch;

  explicit BlockIndex(size_t shard_count);
  size_t ShardIndex(const BlockKey& key) const;
  Shard& ShardFor(const BlockKey& key) const;
  void GroupByShard(std::span<const BlockKey> window, LookupScratch& scratch) const;
  // `groups`: each hit's quota group, alongside `tiers`; empty when groups are not collected
  // (quota_groups_in_use_), and then every block is touched in its tier's common order.
  size_t ScanWindow(std::span<const BlockKey> keys, size_t begin, size_t end, bool count_reads,
                    const std::optional<NamespaceId>& ns, std::vector<TierId>& tiers,
                    std::vector<uint8_t>& groups, LookupScratch& scratch);
  void UndoReads(std::span<const BlockKey> keys, size_t begin, size_t from, size_t end,
                 const LookupScratch& scratch);
  // The ready prefix of `keys` (Lookup's scan), each hit's quota group in `groups` when groups
  // are in use. With `count_reads`, each hit's reads are counted.
  LookupResult FindPrefix(std::span<const BlockKey> keys, bool count_reads,
                          const std::optional<NamespaceId>& ns, std::vector<uint8_t>& groups);
  // Tail first, head last, through each block's order: Touch (a use) or Refresh (not one).
  enum class PrefixUse : uint8_t { kTouch, kRefresh };
  void TouchPrefix(std::span<const BlockKey> keys, const std::vector<TierId>& tiers,
                   const std::vector<uint8_t>& groups, PrefixUse use);
  void MoveBetweenOrders(TierId tier, uint8_t group, EvictionPolicy* from, EvictionPolicy* to);
  // What an entry adds to entry_counts() and shadow_bytes(); all zero for no entry.
  struct Tally {
    uint64_t ready = 0;
    uint64_t writing = 0;
    uint64_t shadowed = 0;
    uint64_t shadow_bytes = 0;
  };
  Tally TallyOf(const BlockMeta& meta) const {
    const bool ready = meta.state == BlockState::kReady;
    return {ready ? 1u : 0u, ready ? 0u : 1u, ready && meta.has_shadow ? 1u : 0u,
            ShadowLength(meta)};
  }
  // Follows the change of an entry from `gone` to `come` (Tally{} for an entry that is new or
  // erased), under that entry's shard lock.
  void Count(const Tally& gone, const Tally& come);
  uint64_t ShadowLength(const BlockMeta& meta) const {
    if (!meta.has_shadow) return 0;
    return shadow_footprint_ ? shadow_footprint_(meta.shadow.length) : meta.shadow.length;
  }

  // Held across the whole of SetGroupQuota and AssignQuotaGroups (taken before any shard's or
  // order's lock): each reads which order a block is in and moves it, in steps under other locks,
  // so two of them interleaved could leave a block in no order (never evicted) or in one that
  // eviction no longer reads.
  Mutex regroup_mu_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::array<TierOrder, kTierCount> tiers_;
  // Set by the first quota (SetGroupQuota), never cleared. Until then every block is in its
  // tier's common order, and Lookup does not collect the blocks' groups for TouchPrefix.
  std::atomic<bool> quota_groups_in_use_{false};
  std::atomic<uint64_t> shadow_bytes_{0};
  std::atomic<uint64_t> ready_blocks_{0};
  std::atomic<uint64_t> writing_blocks_{0};
  std::atomic<uint64_t> shadowed_blocks_{0};
  std::function<uint64_t(uint64_t)> shadow_footprint_;  // Options::shadow_footprint
};

}  // namespace kvtier::index
