#include "daemon/store/store.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <set>

namespace kvtier::store {

using index::BlockMeta;
using index::BlockState;

namespace {

// The position of tier `id` in `tiers`, or tiers.size() when absent.
size_t PositionOf(const std::vector<tiers::Tier*>& tiers, TierId id) {
  for (size_t level = 0; level < tiers.size(); ++level) {
    if (tiers[level]->id() == id) return level;
  }
  return tiers.size();
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Create(const StoreOptions& options,
                                             std::vector<tiers::Tier*> tiers, Clock& clock) {
  if (tiers.empty()) return InvalidArgument("store needs at least one tier");
  std::set<TierId> seen;
  for (tiers::Tier* t : tiers) {
    if (t == nullptr) return InvalidArgument("store tier list contains a null tier");
    if (!seen.insert(t->id()).second) {
      return InvalidArgument("store tier list names tier '" + std::string(TierName(t->id())) +
                             "' twice");
    }
  }
  // The GPU tier takes only blocks promoted from host and demotes its victims there: without a
  // host tier right below it there is nowhere to put a block, and nothing to promote from.
  const size_t gpu = PositionOf(tiers, TierId::kGpu);
  if (gpu < tiers.size() && (gpu != 0 || tiers.size() < 2 || tiers[1]->id() != TierId::kHost)) {
    return InvalidArgument(
        "the GPU tier must be the first tier, with the host tier right after it");
  }
  if (options.max_evictions_per_allocation < 1) {
    return InvalidArgument("max_evictions_per_allocation must be at least 1");
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<index::BlockIndex> index,
                          index::BlockIndex::Create(options.index));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<placement::AdmissionPolicy> admission,
                          placement::MakeAdmissionPolicy(options.nvme_admission));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<placement::GpuPromotionPolicy> gpu_promotion,
                          placement::MakeGpuPromotionPolicy(options.gpu_promotion));
  return std::unique_ptr<Store>(new Store(options, std::move(tiers), std::move(admission),
                                          std::move(gpu_promotion), clock, std::move(index)));
}

Store::Store(const StoreOptions& options, std::vector<tiers::Tier*> tiers,
             std::unique_ptr<placement::AdmissionPolicy> admission,
             std::unique_ptr<placement::GpuPromotionPolicy> gpu_promotion, Clock& clock,
             std::unique_ptr<index::BlockIndex> index)
    : options_(options),
      tiers_(std::move(tiers)),
      put_level_(PositionOf(tiers_, TierId::kHost) < tiers_.size()
                     ? PositionOf(tiers_, TierId::kHost)
                     : 0),
      gpu_level_(PositionOf(tiers_, TierId::kGpu)),
      admission_(std::move(admission)),
      gpu_promotion_(std::move(gpu_promotion)),
      promotion_queue_(options.max_promotion_candidates),
      clock_(clock),
      index_(std::move(index)) {}

Store::~Store() = default;

tiers::Tier* Store::tier(TierId id) const {
  for (tiers::Tier* t : tiers_) {
    if (t->id() == id) return t;
  }
  return nullptr;
}

Status Store::RegisterNamespace(const NamespaceInfo& info) {
  MutexLock lock(namespaces_mu_);
  auto [it, inserted] = namespaces_.try_emplace(info.id, info);
  if (!inserted && (it->second.block_bytes != info.block_bytes ||
                    it->second.tokens_per_block != info.tokens_per_block)) {
    return InvalidArgument("namespace " + info.id.ToHex() +
                           " is already registered with another block size or tokens per block");
  }
  auto& counters = ns_counters_[info.id];
  if (!counters) counters = std::make_unique<NamespaceCounters>();
  return Status::Ok();
}

std::optional<NamespaceInfo> Store::GetNamespace(const NamespaceId& ns) const {
  MutexLock lock(namespaces_mu_);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) return std::nullopt;
  return it->second;
}

std::vector<NamespaceInfo> Store::Namespaces() const {
  MutexLock lock(namespaces_mu_);
  std::vector<NamespaceInfo> out;
  for (const auto& [id, info] : namespaces_) out.push_back(info);
  return out;
}

bool Store::NamespaceRegistered(const NamespaceId& ns) const {
  MutexLock lock(namespaces_mu_);
  return namespaces_.contains(ns);
}

NamespaceCounters* Store::CountersFor(const NamespaceId& ns) const {
  MutexLock lock(namespaces_mu_);
  auto it = ns_counters_.find(ns);
  return it == ns_counters_.end() ? nullptr : it->second.get();
}

Result<Lease> Store::Acquire(const NamespaceId& ns, const BlockKey& key, Reader reader) {
  {
    MutexLock lock(leases_mu_);
    if (leases_.size() >= options_.max_leases) {
      return Busy("too many leases open (" + std::to_string(options_.max_leases) + ")");
    }
  }
  if (options_.promote_on_read) KVTIER_RETURN_IF_ERROR(PromoteForRead(ns, key));
  const uint64_t now = clock_.NowMicros();
  Lease lease;
  bool to_gpu = false;
  uint64_t generation = 0;
  Status st = index_->Update(key, [&](BlockMeta& meta) {
    if (meta.state != BlockState::kReady || meta.ns != ns) return NotFound("block not cached");
    ++meta.lease_count;
    if (meta.reads < UINT8_MAX) ++meta.reads;
    to_gpu = gpu_level_ < tiers_.size() && meta.tier == TierId::kHost &&
             reader == Reader::kGpuPool && gpu_promotion_->OnRead(meta, now);
    generation = meta.generation;
    lease.tier = meta.tier;
    lease.extent = meta.extent;
    lease.checksum = meta.checksum;
    lease.has_checksum = meta.has_checksum;
    return Status::Ok();
  });
  NamespaceCounters* counters = CountersFor(ns);
  if (!st.ok()) {
    if (counters) counters->get_misses.fetch_add(1, std::memory_order_relaxed);
    if (st.code() == StatusCode::kNotFound) return NotFound("block not cached");
    return st;
  }
  if (counters) counters->gets.fetch_add(1, std::memory_order_relaxed);
  if (to_gpu) QueueForGpu(key, generation);
  lease.id = next_id_.fetch_add(1);
  lease.key = key;
  lease.address = tier(lease.tier)->Address(lease.extent);
  lease.deadline_us = now + options_.lease_timeout_us;
  MutexLock lock(leases_mu_);
  leases_.emplace(lease.id, LeaseRecord{ns, key, lease.deadline_us});
  return lease;
}

Status Store::Release(uint64_t lease_id) {
  LeaseRecord record;
  {
    MutexLock lock(leases_mu_);
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) {
      return NotFound("no lease " + std::to_string(lease_id) + " (released or timed out)");
    }
    record = it->second;
    leases_.erase(it);
  }
  EndLease(record);
  return Status::Ok();
}

Status Store::Renew(uint64_t lease_id) {
  MutexLock lock(leases_mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    return NotFound("no lease " + std::to_string(lease_id) + " (released or timed out)");
  }
  it->second.deadline_us = clock_.NowMicros() + options_.lease_timeout_us;
  return Status::Ok();
}

void Store::EndLease(const LeaseRecord& lease) {
  std::optional<BlockMeta> meta;
  Status st = index_->Update(lease.key, [&](BlockMeta& m) {
    if (m.lease_count == 0) return Internal("lease count underflow");
    --m.lease_count;
    meta = m;
    return Status::Ok();
  });
  (void)st;  // The block cannot vanish while leased; a failure here would be a bug in the index.
  if (lease.corrupt && meta) DropCorrupt(lease.key, *meta);
  if (!NamespaceRegistered(lease.ns)) {
    // The namespace was dropped while this block was being read: it goes now.
    std::optional<BlockMeta> gone = index_->EraseIf(
        lease.key, [&](const BlockMeta& m) { return m.lease_count == 0 && m.ns == lease.ns; });
    if (gone) {
      FreeExtent(*gone);
      counters_.removed_blocks.fetch_add(1);
    }
  }
}

Status Store::Get(const NamespaceId& ns, const BlockKey& key, std::vector<std::byte>& out) {
  KVTIER_ASSIGN_OR_RETURN(Lease lease, Acquire(ns, key));
  out.resize(lease.extent.length);
  Status st = lease.address != nullptr
                  ? (std::memcpy(out.data(), lease.address, out.size()), Status::Ok())
                  : ReadLeased(lease, out);
  Status released = Release(lease.id);
  // A lease that ended before its release may have had its slot reused under the read: whatever
  // was read (a checksum mismatch included) is not the block's, and the answer is a miss.
  return released.ok() ? st : released;
}

index::LookupResult Store::Lookup(const NamespaceId& ns, std::span<const BlockKey> keys) {
  std::optional<NamespaceInfo> info = GetNamespace(ns);
  if (!info) return {};
  index::LookupResult result = index_->Lookup(keys, /*touch=*/true, ns);
  if (NamespaceCounters* c = CountersFor(ns)) {
    c->lookups.fetch_add(1, std::memory_order_relaxed);
    c->lookup_blocks.fetch_add(keys.size(), std::memory_order_relaxed);
    // Counted here and added once per tier: an atomic add per block was a locked instruction
    // per key on the lookup path.
    std::array<uint64_t, kTierCount> hits{};
    for (TierId t : result.tiers) ++hits[static_cast<size_t>(t)];
    for (size_t t = 0; t < kTierCount; ++t) {
      if (hits[t] != 0) c->hit_blocks[t].fetch_add(hits[t], std::memory_order_relaxed);
    }
    c->hit_tokens.fetch_add(result.ready_prefix * info->tokens_per_block,
                            std::memory_order_relaxed);
  }
  return result;
}

Status Store::Remove(const NamespaceId& ns, const BlockKey& key) {
  std::optional<BlockMeta> gone = index_->EraseIf(key, [&](const BlockMeta& m) {
    return m.ns == ns && m.state == BlockState::kReady && m.lease_count == 0;
  });
  if (!gone) {
    std::optional<BlockMeta> meta = index_->Get(key);
    if (meta && meta->ns == ns && meta->state == BlockState::kReady) {
      return Busy("block is leased; remove it after the readers release it");
    }
    return NotFound("block not cached");
  }
  FreeExtent(*gone);
  counters_.removed_blocks.fetch_add(1);
  return Status::Ok();
}

Status Store::Pin(const NamespaceId& ns, const BlockKey& key, uint64_t ttl_us) {
  const uint64_t until = ttl_us == 0 ? 0 : clock_.NowMicros() + ttl_us;
  return index_->Update(key, [&](BlockMeta& meta) {
    if (meta.ns != ns || meta.state != BlockState::kReady) return NotFound("block not cached");
    meta.pinned_until_us = until;
    return Status::Ok();
  });
}

Result<uint64_t> Store::DropNamespace(const NamespaceId& ns) {
  {
    MutexLock lock(namespaces_mu_);
    if (namespaces_.erase(ns) == 0)
      return NotFound("namespace " + ns.ToHex() + " is not registered");
    // Blocks of it that the daemon adopts from disk after this must not come back.
    if (pending_adoptions_.load(std::memory_order_relaxed) > 0) dropped_during_adoption_.insert(ns);
  }
  uint64_t removed = 0;
  for (const BlockKey& key : index_->KeysOfNamespace(ns)) {
    std::optional<BlockMeta> gone = index_->EraseIf(key, [&](const BlockMeta& m) {
      return m.ns == ns && m.state == BlockState::kReady && m.lease_count == 0;
    });
    if (!gone) continue;
    FreeExtent(*gone);
    ++removed;
  }
  counters_.removed_blocks.fetch_add(removed);
  return removed;
}

size_t Store::ExpireDeadlines() {
  const uint64_t now = clock_.NowMicros();
  std::vector<ReservationRecord> timed_out;  // their blocks go now; their space stays set aside
  std::vector<ReservationRecord> released;   // quarantine over: their space is reused
  {
    MutexLock lock(reservations_mu_);
    for (auto it = reservations_.begin(); it != reservations_.end();) {
      ReservationRecord& r = it->second;
      if (r.deadline_us > now) {
        ++it;
      } else if (!r.expired) {
        r.expired = true;
        r.deadline_us = now + kQuarantineFactor * options_.reservation_timeout_us;
        timed_out.push_back(r);
        ++it;
      } else {
        released.push_back(r);
        it = reservations_.erase(it);
      }
    }
  }
  for (const ReservationRecord& r : timed_out) {
    index_->EraseIf(r.key, [&](const BlockMeta& m) {
      return m.state == BlockState::kWriting && m.generation == r.generation;
    });
    counters_.expired_reservations.fetch_add(1);
    counters_.aborted_puts.fetch_add(1);
  }
  for (const ReservationRecord& r : released) tier(r.tier)->Free(r.extent);
  size_t expired = timed_out.size();
  std::vector<LeaseRecord> expired_leases;
  {
    MutexLock lock(leases_mu_);
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second.deadline_us <= now) {
        expired_leases.push_back(it->second);
        it = leases_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const LeaseRecord& lease : expired_leases) {
    EndLease(lease);
    counters_.expired_leases.fetch_add(1);
    ++expired;
  }
  return expired;
}

}  // namespace kvtier::store
