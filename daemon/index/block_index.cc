#include "daemon/index/block_index.h"

#include <algorithm>

namespace kvtier::index {
namespace {

bool Evictable(const BlockMeta& meta, uint64_t now_us) {
  return meta.state == BlockState::kReady && meta.lease_count == 0 &&
         meta.pinned_until_us <= now_us;
}

size_t TierIndex(TierId tier) { return static_cast<size_t>(tier); }

}  // namespace

Result<std::unique_ptr<BlockIndex>> BlockIndex::Create(const Options& options) {
  if (options.shard_count == 0) return InvalidArgument("index shard_count must be at least 1");
  std::unique_ptr<BlockIndex> index(new BlockIndex(options.shard_count));
  for (TierOrder& order : index->tiers_) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<EvictionPolicy> policy,
                            MakeEvictionPolicy(options.policy, options.capacity_hint_blocks));
    MutexLock lock(order.mu);
    order.policy = std::move(policy);
  }
  return index;
}

BlockIndex::BlockIndex(size_t shard_count) {
  shards_.reserve(shard_count);
  for (size_t i = 0; i < shard_count; ++i) shards_.push_back(std::make_unique<Shard>());
}

BlockIndex::Shard& BlockIndex::ShardFor(const BlockKey& key) const {
  // The low half picks the bucket inside a shard's map; the high half picks the shard, so the two
  // choices stay independent.
  return *shards_[key.high % shards_.size()];
}

LookupResult BlockIndex::Lookup(std::span<const BlockKey> keys, bool touch,
                                const std::optional<NamespaceId>& ns) {
  LookupResult result;
  result.tiers.reserve(std::min<size_t>(keys.size(), 1024));
  for (const BlockKey& key : keys) {
    Shard& shard = ShardFor(key);
    MutexLock lock(shard.mu);
    auto it = shard.entries.find(key);
    if (it == shard.entries.end() || it->second.state != BlockState::kReady) break;
    if (ns && it->second.ns != *ns) break;
    if (touch && it->second.reads < UINT8_MAX) ++it->second.reads;
    result.tiers.push_back(it->second.tier);
  }
  result.ready_prefix = result.tiers.size();
  if (!touch || result.ready_prefix == 0) return result;
  // Touch the tail first and the head last: the head becomes the most recent, so under pressure a
  // prefix loses its tail before its head and never keeps a child whose parent is gone. A key that
  // was evicted since the scan above is ignored by Touch.
  for (size_t t = 0; t < kTierCount; ++t) {
    if (std::find(result.tiers.begin(), result.tiers.end(), static_cast<TierId>(t)) ==
        result.tiers.end()) {
      continue;
    }
    MutexLock lock(tiers_[t].mu);
    for (size_t i = result.ready_prefix; i-- > 0;) {
      if (TierIndex(result.tiers[i]) == t) tiers_[t].policy->Touch(keys[i]);
    }
  }
  return result;
}

Status BlockIndex::InsertWriting(const BlockKey& key, const BlockMeta& meta) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  auto [it, inserted] = shard.entries.try_emplace(key, meta);
  if (!inserted) {
    if (it->second.ns != meta.ns) return Rejected("key is in use by another namespace");
    if (it->second.state == BlockState::kReady) return AlreadyExists("block is already stored");
    return Busy("block is being written by another client");
  }
  it->second.state = BlockState::kWriting;
  it->second.lease_count = 0;
  return Status::Ok();
}

Status BlockIndex::MarkReady(const BlockKey& key) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) return NotFound("no such block");
  if (it->second.state != BlockState::kWriting)
    return InvalidArgument("block is not being written");
  it->second.state = BlockState::kReady;
  TierOrder& order = tiers_[TierIndex(it->second.tier)];
  MutexLock policy_lock(order.mu);
  order.policy->Insert(key);
  return Status::Ok();
}

Status BlockIndex::InsertReady(const BlockKey& key, const BlockMeta& meta) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  auto [it, inserted] = shard.entries.try_emplace(key, meta);
  if (!inserted) return AlreadyExists("block is already stored");
  it->second.state = BlockState::kReady;
  TierOrder& order = tiers_[TierIndex(meta.tier)];
  MutexLock policy_lock(order.mu);
  order.policy->Insert(key);
  return Status::Ok();
}

Status BlockIndex::Update(const BlockKey& key, const std::function<Status(BlockMeta&)>& fn) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) return NotFound("no such block");
  const TierId tier = it->second.tier;
  const BlockState state = it->second.state;
  Status st = fn(it->second);
  if (it->second.tier != tier || it->second.state != state) {
    it->second.tier = tier;
    it->second.state = state;
    return Internal("BlockIndex::Update may not change a block's tier or state");
  }
  return st;
}

std::optional<BlockMeta> BlockIndex::Get(const BlockKey& key) const {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) return std::nullopt;
  return it->second;
}

std::optional<BlockMeta> BlockIndex::Erase(const BlockKey& key) {
  return EraseIf(key, [](const BlockMeta&) { return true; });
}

std::optional<BlockMeta> BlockIndex::EraseIf(const BlockKey& key,
                                             const std::function<bool(const BlockMeta&)>& pred) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end() || !pred(it->second)) return std::nullopt;
  BlockMeta meta = it->second;
  shard.entries.erase(it);
  if (meta.state == BlockState::kReady) {
    TierOrder& order = tiers_[TierIndex(meta.tier)];
    MutexLock policy_lock(order.mu);
    order.policy->Erase(key);
  }
  return meta;
}

Status BlockIndex::MoveTier(const BlockKey& key, const BlockMeta& from, TierId tier,
                            const Extent& extent, uint32_t mover_pins, bool keep_shadow) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) return NotFound("no such block");
  BlockMeta& meta = it->second;
  if (meta.state != BlockState::kReady || meta.generation != from.generation ||
      meta.tier != from.tier || meta.extent != from.extent) {
    return NotFound("block changed since its bytes were copied");
  }
  // Readers copy straight out of the old extent; it may only be given up once nobody holds it.
  if (meta.lease_count > mover_pins) return Busy("block is leased");
  meta.lease_count -= std::min(meta.lease_count, mover_pins);
  {
    TierOrder& from = tiers_[TierIndex(meta.tier)];
    MutexLock policy_lock(from.mu);
    from.policy->Erase(key);
  }
  if (meta.tier == TierId::kGpu) {
    // Out of the GPU: the block must earn its way back with a fresh window of reads, or a pool
    // that is too small would copy the same blocks up and down at every read.
    meta.window_start_us = 0;
    meta.window_reads = 0;
  }
  meta.tier = tier;
  meta.extent = extent;
  meta.has_shadow = meta.has_shadow && keep_shadow;
  TierOrder& to = tiers_[TierIndex(tier)];
  MutexLock policy_lock(to.mu);
  to.policy->Insert(key);
  return Status::Ok();
}

std::optional<std::pair<BlockKey, BlockMeta>> BlockIndex::PickVictim(TierId tier, uint64_t now_us) {
  TierOrder& order = tiers_[TierIndex(tier)];
  size_t attempts;
  {
    MutexLock lock(order.mu);
    attempts = order.policy->size();
  }
  for (; attempts > 0; --attempts) {
    std::optional<BlockKey> key;
    {
      MutexLock lock(order.mu);
      key = order.policy->PopVictim();
    }
    if (!key) return std::nullopt;
    Shard& shard = ShardFor(*key);
    MutexLock lock(shard.mu);
    auto it = shard.entries.find(*key);
    // Gone, or moved to another tier, since the policy named it: nothing to give back.
    if (it == shard.entries.end() || it->second.tier != tier ||
        it->second.state != BlockState::kReady) {
      continue;
    }
    if (Evictable(it->second, now_us)) return std::make_pair(*key, it->second);
    MutexLock policy_lock(order.mu);
    if (!order.policy->Contains(*key)) order.policy->Insert(*key);
  }
  return std::nullopt;
}

void BlockIndex::Unpick(const BlockKey& key) {
  Shard& shard = ShardFor(key);
  MutexLock lock(shard.mu);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end() || it->second.state != BlockState::kReady) return;
  TierOrder& order = tiers_[TierIndex(it->second.tier)];
  MutexLock policy_lock(order.mu);
  if (!order.policy->Contains(key)) order.policy->Insert(key);
}

std::vector<std::pair<BlockKey, BlockMeta>> BlockIndex::EvictableInRange(TierId tier,
                                                                         const Extent& range,
                                                                         uint64_t now_us) const {
  std::vector<std::pair<BlockKey, BlockMeta>> found;
  ForEach([&](const BlockKey& key, const BlockMeta& meta) {
    if (meta.tier == tier && Evictable(meta, now_us) && meta.extent.offset >= range.offset &&
        meta.extent.offset + meta.extent.length <= range.offset + range.length) {
      found.emplace_back(key, meta);
    }
  });
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
  return order.policy->size();
}

std::string_view BlockIndex::policy_name() const {
  const TierOrder& order = tiers_[0];
  MutexLock lock(order.mu);
  return order.policy->name();
}

}  // namespace kvtier::index
