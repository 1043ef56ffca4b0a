// BlockIndex's quota groups (block_index.h says what a group's quota does to eviction): each
// tier's per-group eviction orders and byte counts, and the victim order they give PickVictim.
#include <algorithm>

#include "daemon/index/block_index.h"

namespace kvtier::index {
namespace {
size_t TierIndex(TierId tier) { return static_cast<size_t>(tier); }
}  // namespace

void BlockIndex::TierOrder::Join(const BlockKey& key, const BlockMeta& meta) {
  OrderOf(meta.quota_group).Insert(key);
  used_bytes[meta.quota_group] += meta.extent.length;
}

void BlockIndex::TierOrder::Leave(const BlockKey& key, const BlockMeta& meta) {
  const uint8_t group = meta.quota_group;
  if (group != 0 && group_policies[group]) group_policies[group]->Erase(key);
  policy->Erase(key);
  used_bytes[group] -= std::min(used_bytes[group], meta.extent.length);
}

EvictionPolicy* BlockIndex::TierOrder::VictimOrder(uint8_t requester) {
  if (groups_with_quota == 0) return policy.get();
  const bool member = requester != 0 && requester < kMaxQuotaGroups;
  // A group over its quota gives up its own blocks first: the requester's, else the furthest over.
  if (member && OverQuota(requester)) return group_policies[requester].get();
  size_t furthest = 0;
  for (size_t g = 1; g < kMaxQuotaGroups; ++g) {
    if (OverQuota(g) && (furthest == 0 || used_bytes[g] - quota_bytes[g] >
                                              used_bytes[furthest] - quota_bytes[furthest])) {
      furthest = g;
    }
  }
  if (furthest != 0) return group_policies[furthest].get();
  if (policy->size() > 0) return policy.get();
  // Only blocks of groups within their quotas are left: a group may make room among its own.
  if (member && quota_bytes[requester] != 0 && group_policies[requester]->size() > 0) {
    return group_policies[requester].get();
  }
  if (requester == kEveryGroup) {
    for (size_t g = 1; g < kMaxQuotaGroups; ++g) {
      if (quota_bytes[g] != 0 && group_policies[g]->size() > 0) {
        return group_policies[g].get();
      }
    }
  }
  return nullptr;
}

size_t BlockIndex::TierOrder::TrackedBlocks() const {
  size_t n = policy->size();
  for (const auto& p : group_policies) n += p ? p->size() : 0;
  return n;
}

Status BlockIndex::SetGroupQuota(uint8_t group, TierId tier, uint64_t quota_bytes) {
  if (group == 0 || group >= kMaxQuotaGroups) {
    return InvalidArgument("quota group " + std::to_string(group) + " is out of range");
  }
  MutexLock regroup(regroup_mu_);
  TierOrder& order = tiers_[TierIndex(tier)];
  EvictionPolicy* from = nullptr;
  EvictionPolicy* to = nullptr;
  {
    MutexLock lock(order.mu);
    const bool had = order.quota_bytes[group] != 0;
    if (quota_bytes != 0 && !order.group_policies[group]) {
      KVTIER_ASSIGN_OR_RETURN(
          order.group_policies[group],
          MakeEvictionPolicy(order.policy_name, order.capacity_hint_blocks, order.policy_clock));
    }
    order.quota_bytes[group] = quota_bytes;
    if (quota_bytes != 0) quota_groups_in_use_.store(true, std::memory_order_relaxed);
    if (had == (quota_bytes != 0)) return Status::Ok();  // same order, new bound
    order.groups_with_quota += quota_bytes != 0 ? 1 : -1;
    from = had ? order.group_policies[group].get() : order.policy.get();
    to = had ? order.policy.get() : order.group_policies[group].get();
  }
  // From here on new blocks and touches of the group use its new order (OrderOf); the blocks
  // already there are moved over. A group's own order, once made, lives as long as the index:
  // MoveBetweenOrders and a concurrent PickVictim hold pointers to it.
  MoveBetweenOrders(tier, group, from, to);
  return Status::Ok();
}

void BlockIndex::MoveBetweenOrders(TierId tier, uint8_t group, EvictionPolicy* from,
                                   EvictionPolicy* to) {
  TierOrder& order = tiers_[TierIndex(tier)];
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    for (const auto& [key, meta] : shard->entries) {
      if (meta.quota_group != group || meta.tier != tier || meta.state != BlockState::kReady) {
        continue;
      }
      MutexLock policy_lock(order.mu);
      // Not in `from`: picked as a victim right now; PickVictim puts it back where it belongs.
      if (!from->Contains(key)) continue;
      from->Erase(key);
      if (!to->Contains(key)) to->Insert(key);
    }
  }
}

void BlockIndex::AssignQuotaGroups(const QuotaGroups& groups) {
  if (groups.empty()) return;
  MutexLock regroup(regroup_mu_);
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    for (auto [key, meta] : shard->entries) {
      auto it = groups.find(meta.ns);
      if (it == groups.end() || meta.quota_group == it->second) continue;
      const uint8_t group = it->second;
      if (meta.state != BlockState::kReady) {
        meta.quota_group = group;  // joins its tier's orders as a member when it becomes ready
        continue;
      }
      TierOrder& order = tiers_[TierIndex(meta.tier)];
      MutexLock policy_lock(order.mu);
      // A block picked as a victim right now is in no order; it keeps out of them (PickVictim or
      // Unpick puts it back under its new group).
      EvictionPolicy& old_order = order.OrderOf(meta.quota_group);
      const bool ordered = old_order.Contains(key);
      order.Leave(key, meta);
      meta.quota_group = group;
      order.used_bytes[group] += meta.extent.length;
      if (ordered) order.OrderOf(group).Insert(key);
    }
  }
}

BlockIndex::GroupUsage BlockIndex::QuotaUsage(uint8_t group, TierId tier) const {
  if (group >= kMaxQuotaGroups) return {};
  const TierOrder& order = tiers_[TierIndex(tier)];
  MutexLock lock(order.mu);
  return GroupUsage{order.used_bytes[group], order.quota_bytes[group]};
}

}  // namespace kvtier::index
