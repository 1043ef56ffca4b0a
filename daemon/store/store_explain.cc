// The store's departure log: recording why blocks leave the node, and Explain, which answers
// KVT.EXPLAIN from the index and that log.
#include <vector>

#include "daemon/store/store.h"

namespace kvtier::store {

using index::BlockMeta;
using index::BlockState;

void Store::RecordDeparture(const BlockKey& key, const BlockMeta& meta, DepartureReason reason,
                            EvictionCause cause, const tiers::TierStats* tier_stats) {
  Departure d;
  d.key = key;
  d.ns = meta.ns;
  d.at_us = clock_.NowMicros();
  d.tier = meta.tier;
  d.reason = reason;
  d.cause = cause;
  if (tier_stats != nullptr) {
    d.tier_used_bytes = tier_stats->used_bytes;
    d.tier_capacity_bytes = tier_stats->capacity_bytes;
  }
  departures_.Record(d);
}

std::vector<BlockExplanation> Store::Explain(const NamespaceId& ns,
                                             std::span<const BlockKey> keys) const {
  std::vector<BlockExplanation> out(keys.size());
  std::vector<BlockKey> absent;
  std::vector<size_t> absent_at;
  for (size_t i = 0; i < keys.size(); ++i) {
    // Get, not Lookup: no touch, no statistics. A key held by another namespace is absent here,
    // as it is to Lookup: nothing of another namespace is revealed.
    std::optional<BlockMeta> meta = index_->Get(keys[i]);
    if (meta && meta->ns == ns) {
      out[i].state = meta->state == BlockState::kReady ? BlockExplanation::State::kPresent
                                                       : BlockExplanation::State::kWriting;
      out[i].tier = meta->tier;
      continue;
    }
    absent.push_back(keys[i]);
    absent_at.push_back(i);
  }
  const std::vector<std::optional<Departure>> departed = departures_.Find(ns, absent);
  const uint64_t now = clock_.NowMicros();
  for (size_t j = 0; j < absent.size(); ++j) {
    BlockExplanation& ex = out[absent_at[j]];
    ex.departure = departed[j];
    if (ex.departure && now > ex.departure->at_us) ex.departed_age_us = now - ex.departure->at_us;
  }
  return out;
}

std::vector<std::optional<TierId>> Store::Where(const NamespaceId& ns,
                                                std::span<const BlockKey> keys) const {
  std::vector<std::optional<TierId>> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (const std::optional<StoredSize> stored = SizeOf(ns, keys[i])) out[i] = stored->tier;
  }
  return out;
}

std::optional<StoredSize> Store::SizeOf(const NamespaceId& ns, const BlockKey& key) const {
  std::optional<BlockMeta> meta = index_->Get(key);
  if (!meta || meta->ns != ns || meta->state != BlockState::kReady) return std::nullopt;
  return StoredSize{.bytes = meta->extent.length, .tier = meta->tier};
}

uint64_t Store::FootprintOf(TierId tier, uint64_t bytes) const {
  for (const tiers::Tier* t : tiers_) {
    if (t->id() == tier) return t->FootprintOf(bytes);
  }
  return bytes;
}

}  // namespace kvtier::store
