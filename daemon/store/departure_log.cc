#include "daemon/store/departure_log.h"

#include <unordered_map>

namespace kvtier::store {

std::string_view DepartureReasonName(DepartureReason reason) {
  switch (reason) {
    case DepartureReason::kEvicted:
      return "evicted";
    case DepartureReason::kCorrupt:
      return "corrupt";
    case DepartureReason::kRemoved:
      return "removed";
    case DepartureReason::kNamespaceDropped:
      return "namespace_dropped";
  }
  return "unknown";
}

std::string_view EvictionCauseName(EvictionCause cause) {
  switch (cause) {
    case EvictionCause::kNone:
      return "none";
    case EvictionCause::kLastTier:
      return "last_tier";
    case EvictionCause::kAdmissionRefused:
      return "admission_refused";
    case EvictionCause::kDiskLag:
      return "disk_lag";
    case EvictionCause::kNoRoomBelow:
      return "no_room_below";
  }
  return "unknown";
}

namespace {

size_t ShardOf(const BlockKey& key) {
  // Keys are uniform hashes; a few high bits pick the shard. The low bits already pick the
  // index's shard, and using other bits keeps the two spreads independent.
  return static_cast<size_t>(key.high >> 60) % DepartureLog::kShards;
}

}  // namespace

DepartureLog::DepartureLog(size_t capacity) : per_shard_((capacity + kShards - 1) / kShards) {
  for (Shard& s : shards_) {
    MutexLock lock(s.mu);
    if (per_shard_ > 0) s.ring = std::make_unique<Departure[]>(per_shard_);
  }
}

void DepartureLog::Record(const Departure& departure) {
  if (per_shard_ == 0) return;
  Shard& s = shards_[ShardOf(departure.key)];
  MutexLock lock(s.mu);
  s.ring[s.next % per_shard_] = departure;
  ++s.next;
}

std::vector<std::optional<Departure>> DepartureLog::Find(const NamespaceId& ns,
                                                         std::span<const BlockKey> keys) const {
  std::vector<std::optional<Departure>> found(keys.size());
  if (per_shard_ == 0 || keys.empty()) return found;
  // Where each asked key's answer goes; a key asked twice gets its answer copied at the end.
  std::unordered_map<BlockKey, size_t, Key128Hash> wanted;
  wanted.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) wanted.try_emplace(keys[i], i);
  for (const Shard& s : shards_) {
    MutexLock lock(s.mu);
    const uint64_t held = s.next < per_shard_ ? s.next : per_shard_;
    // Newest first, so the first match of a key is its newest departure.
    for (uint64_t back = 1; back <= held; ++back) {
      const Departure& d = s.ring[(s.next - back) % per_shard_];
      auto it = wanted.find(d.key);
      if (it == wanted.end() || d.ns != ns || found[it->second]) continue;
      found[it->second] = d;
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const size_t first = wanted.at(keys[i]);
    if (first != i) found[i] = found[first];
  }
  return found;
}

uint64_t DepartureLog::recorded() const {
  uint64_t n = 0;
  for (const Shard& s : shards_) {
    MutexLock lock(s.mu);
    n += s.next;
  }
  return n;
}

}  // namespace kvtier::store
