#include "daemon/index/block_index.h"

#include <algorithm>
#include <numeric>

namespace kvtier::index {
namespace {

bool Evictable(const BlockMeta& meta, uint64_t now_us) {
  return meta.state == BlockState::kReady && meta.lease_count == 0 &&
         meta.pinned_until_us <= now_us;
}

size_t TierIndex(TierId tier) { return static_cast<size_t>(tier); }

// A ready block visible to a lookup restricted to `ns` (any namespace when unset), and not one a
// namespace drop left behind.
bool Matches(const BlockMeta& meta, const std::optional<NamespaceId>& ns) {
  return ns ? meta.VisibleIn(*ns) : meta.state == BlockState::kReady && !meta.dropped;
}

// Lookups of fewer keys take each key's shard lock in turn: sorting them by shard would cost more
// than the locks it saves. Also the first window of a grouped lookup, doubled each round, so a
// miss early in a long batch costs a few extra probes, not the whole batch.
constexpr size_t kMinGroupedKeys = 16;

}  // namespace

Result<std::unique_ptr<BlockIndex>> BlockIndex::Create(const Options& options) {
  if (options.shard_count == 0 || options.shard_count > UINT32_MAX) {
    return InvalidArgument("index shard_count must be between 1 and 2^32 - 1");
  }
  std::unique_ptr<BlockIndex> index(new BlockIndex(options.shard_count));
  index->shadow_footprint_ = options.shadow_footprint;
  for (size_t t = 0; t < index->tiers_.size(); ++t) {
    const std::string& name =
        options.tier_policies[t].empty() ? options.policy : options.tier_policies[t];
    KVTIER_ASSIGN_OR_RETURN(
        std::unique_ptr<EvictionPolicy> policy,
        MakeEvictionPolicy(name, options.capacity_hint_blocks, options.policy_clock));
    TierOrder& order = index->tiers_[t];
    MutexLock lock(order.mu);
    order.policy = std::move(policy);
    order.policy_name = name;
    order.policy_clock = options.policy_clock;
    order.capacity_hint_blocks = options.capacity_hint_blocks;
  }
  return index;
}

BlockIndex::BlockIndex(size_t shard_count) {
  shards_.reserve(shard_count);
  for (size_t i = 0; i < shard_count; ++i) shards_.push_back(std::make_unique<Shard>());
}

size_t BlockIndex::ShardIndex(const BlockKey& key) const {
  // The low half picks the bucket inside a shard's map; the high half picks the shard, so the two
  // choices stay independent. A multiply-high instead of `%`: a 64-bit division costs up to 40+
  // cycles on some CPUs, and Lookup computes one for every key of a batch. Exact for shard counts
  // below 2^32, which Create checks.
  return static_cast<size_t>(((key.high >> 32) * shards_.size()) >> 32);
}

BlockIndex::Shard& BlockIndex::ShardFor(const BlockKey& key) const {
  return *shards_[ShardIndex(key)];
}

// Buffers of one Lookup, reused by its windows. The outcome of each key is kept so that a reads
// bump past the first miss can be taken back.
struct BlockIndex::LookupScratch {
  enum Outcome : uint8_t { kMiss, kHit, kHitReadsBumped };
  std::vector<uint32_t> shard_of;    // per window position
  std::vector<uint32_t> run_start;   // per shard: where its keys start in `order`
  std::vector<uint32_t> order;       // window positions grouped by shard, in key order
  std::vector<Outcome> outcome;      // per window position
  std::vector<uint64_t> generation;  // per window position, when reads was bumped
};

LookupResult BlockIndex::Lookup(std::span<const BlockKey> keys, bool touch,
                                const std::optional<NamespaceId>& ns) {
  // The quota group of each block of the prefix, where groups have orders of their own: Touch
  // finds a block in its group's order. Empty (not allocated) before the first quota.
  std::vector<uint8_t> groups;
  LookupResult result = FindPrefix(keys, touch, ns, groups);
  if (touch) TouchPrefix(keys, result.tiers, groups, PrefixUse::kTouch);
  return result;
}

size_t BlockIndex::Refresh(std::span<const BlockKey> keys, const std::optional<NamespaceId>& ns) {
  std::vector<uint8_t> groups;
  const LookupResult result = FindPrefix(keys, /*count_reads=*/false, ns, groups);
  TouchPrefix(keys, result.tiers, groups, PrefixUse::kRefresh);
  return result.ready_prefix;
}

LookupResult BlockIndex::FindPrefix(std::span<const BlockKey> keys, bool count_reads,
                                    const std::optional<NamespaceId>& ns,
                                    std::vector<uint8_t>& groups) {
  LookupResult result;
  const bool grouped = quota_groups_in_use_.load(std::memory_order_relaxed);
  if (keys.size() < kMinGroupedKeys) {
    result.tiers.reserve(keys.size());
    if (grouped) groups.reserve(keys.size());
    for (const BlockKey& key : keys) {
      Shard& shard = ShardFor(key);
      MutexLock lock(shard.mu);
      BlockMeta* meta = shard.entries.Find(key);
      if (meta == nullptr || !Matches(*meta, ns)) break;
      if (count_reads && meta->reads < UINT8_MAX) ++meta->reads;
      result.tiers.push_back(meta->tier);
      if (grouped) groups.push_back(meta->quota_group);
    }
  } else {
    result.tiers.resize(keys.size());
    if (grouped) groups.resize(keys.size());
    LookupScratch scratch;
    size_t begin = 0;
    for (size_t window = kMinGroupedKeys; begin < keys.size(); window *= 2) {
      const size_t end = std::min(keys.size(), begin + window);
      const size_t miss =
          ScanWindow(keys, begin, end, count_reads, ns, result.tiers, groups, scratch);
      if (miss < end) {
        if (count_reads) UndoReads(keys, begin, miss + 1, end, scratch);
        begin = miss;
        break;
      }
      begin = end;
    }
    result.tiers.resize(begin);
    if (grouped) groups.resize(begin);
  }
  result.ready_prefix = result.tiers.size();
  return result;
}

// A counting sort of the window's positions by shard into s.order, stable so that each shard's
// keys keep their order; s.run_start[k] is where shard k's run begins.
void BlockIndex::GroupByShard(std::span<const BlockKey> window, LookupScratch& s) const {
  const size_t n = window.size();
  s.shard_of.resize(n);
  s.order.resize(n);
  s.run_start.assign(shards_.size(), 0);
  for (size_t i = 0; i < n; ++i) {
    s.shard_of[i] = static_cast<uint32_t>(ShardIndex(window[i]));
    ++s.run_start[s.shard_of[i]];
  }
  // Counts, summed into each run's end, then stepped back to its start while placing.
  std::partial_sum(s.run_start.begin(), s.run_start.end(), s.run_start.begin());
  for (size_t i = n; i-- > 0;) s.order[--s.run_start[s.shard_of[i]]] = static_cast<uint32_t>(i);
}

// Checks keys[begin, end) one shard at a time, each shard's keys under one hold of its lock.
// Locking per key made every key pay a lock and an unlock, and each locked instruction is a full
// fence that keeps the CPU from overlapping one key's cache misses with the next key's; grouped,
// the misses of a shard's keys overlap. Keys are visited out of order, so reads is bumped on
// every hit and taken back by UndoReads past the first miss. Returns the first miss, or `end`.
size_t BlockIndex::ScanWindow(std::span<const BlockKey> keys, size_t begin, size_t end,
                              bool count_reads, const std::optional<NamespaceId>& ns,
                              std::vector<TierId>& tiers, std::vector<uint8_t>& groups,
                              LookupScratch& s) {
  const size_t n = end - begin;
  GroupByShard(keys.subspan(begin, n), s);
  s.outcome.assign(n, LookupScratch::kMiss);
  s.generation.resize(n);
  for (size_t k = 0; k < shards_.size(); ++k) {
    const size_t run_begin = s.run_start[k];
    const size_t run_end = k + 1 < shards_.size() ? s.run_start[k + 1] : n;
    if (run_begin == run_end) continue;
    Shard& shard = *shards_[k];
    MutexLock lock(shard.mu);
    for (size_t j = run_begin; j < run_end; ++j) {
      const size_t pos = s.order[j];
      BlockMeta* found = shard.entries.Find(keys[begin + pos]);
      if (found == nullptr || !Matches(*found, ns)) continue;
      BlockMeta& meta = *found;
      tiers[begin + pos] = meta.tier;
      if (!groups.empty()) groups[begin + pos] = meta.quota_group;
      s.outcome[pos] = LookupScratch::kHit;
      if (count_reads && meta.reads < UINT8_MAX) {
        ++meta.reads;
        s.outcome[pos] = LookupScratch::kHitReadsBumped;
        s.generation[pos] = meta.generation;
      }
    }
  }
  const auto first_miss = std::find(s.outcome.begin(), s.outcome.end(), LookupScratch::kMiss);
  return begin + static_cast<size_t>(first_miss - s.outcome.begin());
}

// Takes back the reads bumps of keys[from, end) made by ScanWindow(keys, begin, end): keys past
// the first miss are not part of the prefix and must not count as read. A block removed and
// stored again meanwhile (a new generation) is left alone.
void BlockIndex::UndoReads(std::span<const BlockKey> keys, size_t begin, size_t from, size_t end,
                           const LookupScratch& s) {
  for (size_t i = from; i < end; ++i) {
    if (s.outcome[i - begin] != LookupScratch::kHitReadsBumped) continue;
    Shard& shard = ShardFor(keys[i]);
    MutexLock lock(shard.mu);
    BlockMeta* meta = shard.entries.Find(keys[i]);
    if (meta == nullptr || meta->generation != s.generation[i - begin]) continue;
    if (meta->reads > 0) --meta->reads;
  }
}

// Touch the tail first and the head last: the head becomes the most recent, so under pressure a
// prefix loses its tail before its head and never keeps a child whose parent is gone. A key that
// was evicted since the scan is ignored by Touch.
void BlockIndex::TouchPrefix(std::span<const BlockKey> keys, const std::vector<TierId>& tiers,
                             const std::vector<uint8_t>& groups, PrefixUse use) {
  for (size_t t = 0; t < kTierCount; ++t) {
    if (std::find(tiers.begin(), tiers.end(), static_cast<TierId>(t)) == tiers.end()) continue;
    TierOrder& order = tiers_[t];
    MutexLock lock(order.mu);
    const auto group_at = [&](size_t i) { return groups.empty() ? uint8_t{0} : groups[i]; };
    // Deepest first, as runs of neighbours in this tier and quota group (the whole prefix, most
    // often): one call to the policy per run.
    for (size_t end = tiers.size(); end > 0;) {
      if (TierIndex(tiers[end - 1]) != t) {
        --end;
        continue;
      }
      size_t begin = end - 1;
      while (begin > 0 && TierIndex(tiers[begin - 1]) == t &&
             group_at(begin - 1) == group_at(end - 1)) {
        --begin;
      }
      EvictionPolicy& policy = order.OrderOf(group_at(end - 1));
      const std::span<const BlockKey> run = keys.subspan(begin, end - begin);
      if (use == PrefixUse::kTouch) {
        policy.TouchRun(run);
      } else {
        for (size_t i = run.size(); i-- > 0;) policy.Refresh(run[i]);
      }
      end = begin;
    }
  }
}

Status BlockIndex::InsertWriting(const BlockKey& key, const BlockMeta& meta) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  auto [entry, inserted] = shard.entries.TryEmplace(key, meta);
  if (!inserted) {
    if (entry->ns != meta.ns) return Rejected("key is in use by another namespace");
    if (entry->state == BlockState::kReady) return AlreadyExists("block is already stored");
    return Busy("block is being written by another client");
  }
  entry->state = BlockState::kWriting;
  entry->lease_count = 0;
  Count({}, TallyOf(*entry));
  return Status::Ok();
}

Status BlockIndex::MarkReady(const BlockKey& key) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  BlockMeta* meta = shard.entries.Find(key);
  if (meta == nullptr) return NotFound("no such block");
  if (meta->state != BlockState::kWriting) return InvalidArgument("block is not being written");
  const Tally before = TallyOf(*meta);
  meta->state = BlockState::kReady;
  Count(before, TallyOf(*meta));
  TierOrder& order = tiers_[TierIndex(meta->tier)];
  MutexLock policy_lock(order.mu);
  order.Join(key, *meta);
  return Status::Ok();
}

Status BlockIndex::InsertReady(const BlockKey& key, const BlockMeta& meta) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  auto [entry, inserted] = shard.entries.TryEmplace(key, meta);
  if (!inserted) return AlreadyExists("block is already stored");
  entry->state = BlockState::kReady;
  Count({}, TallyOf(*entry));
  TierOrder& order = tiers_[TierIndex(meta.tier)];
  MutexLock policy_lock(order.mu);
  order.Join(key, *entry);
  return Status::Ok();
}

Status BlockIndex::Update(const BlockKey& key, const std::function<Status(BlockMeta&)>& fn) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  BlockMeta* meta = shard.entries.Find(key);
  if (meta == nullptr) return NotFound("no such block");
  const Tally before = TallyOf(*meta);
  const TierId tier = meta->tier;
  const BlockState state = meta->state;
  Status st = fn(*meta);
  const bool moved = meta->tier != tier || meta->state != state;
  meta->tier = tier;
  meta->state = state;
  Count(before, TallyOf(*meta));
  if (moved) return Internal("BlockIndex::Update may not change a block's tier or state");
  return st;
}

std::optional<BlockMeta> BlockIndex::Get(const BlockKey& key) const {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  const BlockMeta* meta = shard.entries.Find(key);
  if (meta == nullptr) return std::nullopt;
  return *meta;
}

std::optional<BlockMeta> BlockIndex::Erase(const BlockKey& key) {
  return EraseIf(key, [](const BlockMeta&) { return true; });
}

std::optional<BlockMeta> BlockIndex::EraseIf(const BlockKey& key,
                                             const std::function<bool(const BlockMeta&)>& pred) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  const std::optional<BlockMeta> erased = shard.entries.EraseIf(key, pred);
  if (!erased) return std::nullopt;
  const BlockMeta& meta = *erased;
  Count(TallyOf(meta), {});
  if (meta.state == BlockState::kReady) {
    TierOrder& order = tiers_[TierIndex(meta.tier)];
    MutexLock policy_lock(order.mu);
    order.Leave(key, meta);
  }
  return meta;
}

Status BlockIndex::MoveTier(const BlockKey& key, const BlockMeta& from, TierId tier,
                            const Extent& extent, uint32_t mover_pins, ShadowAfterMove shadow) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  BlockMeta* found = shard.entries.Find(key);
  if (found == nullptr) return NotFound("no such block");
  BlockMeta& meta = *found;
  // The shadow as well: `shadow` was decided from `from`, and a write-through copy attached since
  // (it pins the block as a reader does, so it may run during a move) would be forgotten.
  if (!meta.SameIncarnationAs(from)) {
    return NotFound("block changed since its bytes were copied");
  }
  // Readers copy straight out of the old extent; it may only be given up once nobody holds it.
  if (meta.lease_count > mover_pins) return Busy("block is leased");
  meta.lease_count -= std::min(meta.lease_count, mover_pins);
  {
    TierOrder& from = tiers_[TierIndex(meta.tier)];
    MutexLock policy_lock(from.mu);
    from.Leave(key, meta);
  }
  if (meta.tier == TierId::kGpu) {
    // Out of the GPU: the block must earn its way back with a fresh window of reads, or a pool
    // that is too small would copy the same blocks up and down at every read.
    meta.window_start_us = 0;
    meta.window_reads = 0;
  }
  const Tally before = TallyOf(meta);
  switch (shadow) {
    case ShadowAfterMove::kForget:
      meta.has_shadow = false;
      break;
    case ShadowAfterMove::kKeep:
      break;
    case ShadowAfterMove::kOldExtent:
      meta.has_shadow = true;
      meta.shadow = meta.extent;
      break;
  }
  meta.tier = tier;
  meta.extent = extent;
  Count(before, TallyOf(meta));
  TierOrder& to = tiers_[TierIndex(tier)];
  MutexLock policy_lock(to.mu);
  to.Join(key, meta);
  return Status::Ok();
}

void BlockIndex::Count(const Tally& gone, const Tally& come) {
  // Unsigned differences: a fall adds its two's complement. Under the shard lock, an entry's
  // changes reach each counter in order, so no counter is seen below zero.
  const auto add = [](std::atomic<uint64_t>& counter, uint64_t to, uint64_t from) {
    if (to != from) counter.fetch_add(to - from, std::memory_order_relaxed);
  };
  add(ready_blocks_, come.ready, gone.ready);
  add(writing_blocks_, come.writing, gone.writing);
  add(shadowed_blocks_, come.shadowed, gone.shadowed);
  add(shadow_bytes_, come.shadow_bytes, gone.shadow_bytes);
}

BlockIndex::EntryCounts BlockIndex::entry_counts() const {
  return {ready_blocks_.load(std::memory_order_relaxed),
          writing_blocks_.load(std::memory_order_relaxed),
          shadowed_blocks_.load(std::memory_order_relaxed)};
}

std::optional<std::pair<BlockKey, BlockMeta>> BlockIndex::PickVictim(TierId tier, uint64_t now_us,
                                                                     uint8_t requester) {
  TierOrder& order = tiers_[TierIndex(tier)];
  size_t attempts;
  {
    MutexLock lock(order.mu);
    attempts = order.TrackedBlocks();
  }
  // Blocks found leased or pinned stay out of the policy until the search ends. Put back at once,
  // a policy may name the same block again at the next pop (S3-FIFO's small queue, ARC's recent
  // list and TinyLFU's window each take their next victim from where a put-back block lands while
  // they are over their share), and a few leased blocks would hide every evictable one. Out of
  // the policy, they also empty their order when they are all its blocks, and VictimOrder then
  // passes to the next one, so one group's leased blocks cannot keep the others' from being picked.
  std::vector<BlockKey> refused;
  std::optional<std::pair<BlockKey, BlockMeta>> victim;
  for (; attempts > 0 && !victim; --attempts) {
    std::optional<BlockKey> key;
    {
      MutexLock lock(order.mu);
      EvictionPolicy* from = order.VictimOrder(requester);
      if (from == nullptr) break;
      key = from->PopVictim();
    }
    if (!key) break;
    Shard& shard = ShardFor(*key);
    MutexLock lock(shard.mu);
    const BlockMeta* meta = shard.entries.Find(*key);
    // Gone, or moved to another tier, since the policy named it: nothing to give back.
    if (meta == nullptr || meta->tier != tier || meta->state != BlockState::kReady) continue;
    if (Evictable(*meta, now_us)) {
      victim.emplace(*key, *meta);
    } else {
      refused.push_back(*key);
    }
  }
  for (const BlockKey& key : refused) ReturnToPolicy(key, tier);
  return victim;
}

void BlockIndex::Unpick(const BlockKey& key) { ReturnToPolicy(key, std::nullopt); }

void BlockIndex::ReturnToPolicy(const BlockKey& key, std::optional<TierId> tier) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  const BlockMeta* meta = shard.entries.Find(key);
  // Erased, or moved to another tier meanwhile: its new place has its own order.
  if (meta == nullptr || meta->state != BlockState::kReady || (tier && meta->tier != *tier)) return;
  TierOrder& order = tiers_[TierIndex(meta->tier)];
  MutexLock policy_lock(order.mu);
  order.OrderOf(meta->quota_group).PutBack(key);
}

namespace {

// Starts inside, not lies inside: an NVMe block's extent is its payload, its footprint longer.
bool EvictableStartingIn(const BlockMeta& meta, TierId tier, const Extent& range, uint64_t now_us) {
  return meta.tier == tier && Evictable(meta, now_us) && meta.extent.offset >= range.offset &&
         meta.extent.offset - range.offset < range.length;
}

}  // namespace

std::vector<std::pair<BlockKey, BlockMeta>> BlockIndex::EvictableInRange(TierId tier,
                                                                         const Extent& range,
                                                                         uint64_t now_us) const {
  std::vector<std::pair<BlockKey, BlockMeta>> found;
  ForEach([&](const BlockKey& key, const BlockMeta& meta) {
    if (EvictableStartingIn(meta, tier, range, now_us)) found.emplace_back(key, meta);
  });
  return found;
}

std::vector<std::pair<BlockKey, BlockMeta>> BlockIndex::EvictableInRange(
    TierId tier, const Extent& range, std::span<const BlockKey> keys, uint64_t now_us) const {
  std::vector<std::pair<BlockKey, BlockMeta>> found;
  for (const BlockKey& key : keys) {
    Shard& shard = ShardFor(key);
    MutexLock lock(shard.mu);
    const BlockMeta* meta = shard.entries.Find(key);
    if (meta != nullptr && EvictableStartingIn(*meta, tier, range, now_us)) {
      found.emplace_back(key, *meta);
    }
  }
  return found;
}

std::vector<BlockKey> BlockIndex::KeysOfNamespace(const NamespaceId& ns) const {
  std::vector<BlockKey> keys;
  ForEach([&](const BlockKey& key, const BlockMeta& meta) {
    if (meta.ns == ns) keys.push_back(key);
  });
  return keys;
}

void BlockIndex::ForEach(const std::function<void(const BlockKey&, const BlockMeta&)>& fn) const {
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    for (const auto& [key, meta] : shard->entries) fn(key, meta);
  }
}

size_t BlockIndex::size() const {
  size_t n = 0;
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    n += shard->entries.size();
  }
  return n;
}

size_t BlockIndex::TrackedBlocks(TierId tier) const {
  const TierOrder& order = tiers_[TierIndex(tier)];
  MutexLock lock(order.mu);
  return order.TrackedBlocks();
}

bool BlockIndex::AdmitsNew(TierId tier, uint8_t group) {
  TierOrder& order = tiers_[TierIndex(tier)];
  MutexLock lock(order.mu);
  return order.OrderOf(group).AdmitsNew();
}

void BlockIndex::NotAdmitted(TierId tier, uint8_t group, const BlockKey& key) {
  TierOrder& order = tiers_[TierIndex(tier)];
  MutexLock lock(order.mu);
  order.OrderOf(group).NotAdmitted(key);
}

std::string_view BlockIndex::policy_name(TierId tier) const {
  const TierOrder& order = tiers_[TierIndex(tier)];
  MutexLock lock(order.mu);
  return order.policy->name();
}

}  // namespace kvtier::index
