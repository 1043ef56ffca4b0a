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
  if (!(options.nvme_copy_share >= 0.0 && options.nvme_copy_share <= 1.0)) {
    return InvalidArgument("nvme_copy_share must be between 0 and 1");
  }
  index::BlockIndex::Options index_options = options.index;
  // Copies on NVMe are counted in the room they take there, which the share is a part of.
  if (const size_t nvme = PositionOf(tiers, TierId::kNvme); nvme < tiers.size()) {
    const tiers::Tier* nvme_tier = tiers[nvme];
    index_options.shadow_footprint = [nvme_tier](uint64_t bytes) {
      return nvme_tier->FootprintOf(bytes);
    };
  }
  // Policies that learn from time (sticky) read the store's clock, a fake one in tests.
  if (!index_options.policy_clock) {
    index_options.policy_clock = [&clock] { return clock.NowMillisCoarse(); };
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<index::BlockIndex> index,
                          index::BlockIndex::Create(index_options));
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
      nvme_copy_room_(tier(TierId::kNvme) == nullptr
                          ? 0
                          : static_cast<uint64_t>(
                                options.nvme_copy_share *
                                static_cast<double>(tier(TierId::kNvme)->Stats().capacity_bytes))),
      admission_(std::move(admission)),
      gpu_promotion_(std::move(gpu_promotion)),
      promotion_queue_(options.max_promotion_candidates),
      clock_(clock),
      index_(std::move(index)),
      reservations_(options.max_reservations),
      leases_(options.max_leases),
      move_stats_(options.latency_histograms),
      departures_(options.departure_log_entries) {}

Store::~Store() = default;

tiers::Tier* Store::tier(TierId id) const {
  for (tiers::Tier* t : tiers_) {
    if (t->id() == id) return t;
  }
  return nullptr;
}

Result<tiers::PoolExport> Store::ExportForClients(TierId id) const {
  tiers::Tier* t = tier(id);
  if (t == nullptr) {
    return Status(StatusCode::kNotFound, "no " + std::string(TierName(id)) + " tier in the store");
  }
  return t->ExportForClients();
}

Status Store::RegisterNamespace(const NamespaceInfo& info) {
  // Under the quota lock: a SetQuota between reading the rules and registering would otherwise
  // miss the namespace, which would keep the group the rules had before.
  MutexLock lock(quota_mu_);
  NamespaceInfo with_group = info;
  with_group.quota_group = QuotaGroupOf(info);
  const bool known = namespaces_.Registered(info.id);
  KVTIER_RETURN_IF_ERROR(namespaces_.Register(with_group));
  // Blocks adopted from NVMe before their namespace registered (a restart) join its group: a
  // scan of the index, once per namespace with a quota and a daemon's life.
  if (!known && with_group.quota_group != 0) {
    index_->AssignQuotaGroups({{info.id, with_group.quota_group}});
  }
  return Status::Ok();
}

uint8_t Store::QuotaGroupOf(const NamespaceInfo& info) const {
  return quotas_.GroupOf(info.id, info.TenantSalt());
}

Status Store::SetQuota(const QuotaSubject& who, TierId tier, uint64_t bytes) {
  if (tier == TierId::kRemote || LevelOf(tier) >= tiers_.size()) {
    return NotFound("no " + std::string(TierName(tier)) + " tier to set a quota in");
  }
  MutexLock lock(quota_mu_);
  KVTIER_ASSIGN_OR_RETURN(const uint8_t group, quotas_.Set(who, tier, bytes));
  // Membership first (each namespace that now falls in a group, with its blocks), then the
  // group's order in the tier: either way round every block ends where it belongs.
  index::BlockIndex::QuotaGroups regrouped;
  for (const NamespaceInfo& info : namespaces_.List()) {
    const uint8_t now = QuotaGroupOf(info);
    if (now == info.quota_group) continue;
    if (namespaces_.SetQuotaGroup(info.id, now).ok()) regrouped.emplace(info.id, now);
  }
  index_->AssignQuotaGroups(regrouped);
  return index_->SetGroupQuota(group, tier, bytes);
}

std::vector<Store::QuotaReport> Store::Quotas() const {
  std::vector<QuotaReport> out;
  for (const QuotaRule& rule : quotas_.Rules()) {
    QuotaReport report;
    report.subject = rule.subject;
    for (size_t t = 0; t < kTierCount; ++t) {
      const index::BlockIndex::GroupUsage usage =
          index_->QuotaUsage(rule.group, static_cast<TierId>(t));
      report.quota_bytes[t] = rule.bytes[t];
      report.used_bytes[t] = usage.used_bytes;
    }
    out.push_back(report);
  }
  return out;
}

std::optional<NamespaceInfo> Store::GetNamespace(const NamespaceId& ns) const {
  return namespaces_.Get(ns);
}

std::vector<NamespaceInfo> Store::Namespaces() const { return namespaces_.List(); }

Result<Lease> Store::Acquire(const NamespaceId& ns, const BlockKey& key, Reader reader) {
  if (leases_.Full()) {
    return Busy("too many leases open (" + std::to_string(leases_.max()) + ")");
  }
  if (options_.promote_on_read) KVTIER_RETURN_IF_ERROR(PromoteForRead(ns, key));
  const uint64_t now = clock_.NowMicros();
  Lease lease;
  bool to_gpu = false;
  uint64_t generation = 0;
  Status st = index_->Update(key, [&](BlockMeta& meta) {
    if (!meta.VisibleIn(ns)) return NotFound("block not cached");
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
  if (st.code() == StatusCode::kNotFound) {
    // Not here: perhaps another node published it (kPending while the mover fetches it).
    KVTIER_RETURN_IF_ERROR(FetchRemoteForRead(ns, key));
  }
  NamespaceCounters* counters = namespaces_.Counters(ns);
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
  leases_.Add(lease.id, LeaseRecord{ns, key, lease.deadline_us});
  return lease;
}

Status Store::Release(uint64_t lease_id) {
  std::optional<LeaseRecord> record = leases_.Take(lease_id);
  if (!record) return NotFound("no lease " + std::to_string(lease_id) + " (released or timed out)");
  EndLease(*record);
  return Status::Ok();
}

Status Store::Renew(uint64_t lease_id) {
  if (!leases_.Renew(lease_id, clock_.NowMicros() + options_.lease_timeout_us)) {
    return NotFound("no lease " + std::to_string(lease_id) + " (released or timed out)");
  }
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
  if (meta) RemoveIfNamespaceDropped(lease.key, *meta);
}

void Store::RemoveIfNamespaceDropped(const BlockKey& key, const BlockMeta& meta) {
  if (namespaces_.Holds(meta.ns, meta.generation)) return;
  // DropNamespace skipped the block while it was leased or pinned for a move: it goes now, even
  // if the namespace was registered again meanwhile. Only this incarnation: were the key put
  // anew since, the new block (being written, say) is not this one's to remove.
  std::optional<BlockMeta> gone = index_->EraseIf(key, [&](const BlockMeta& m) {
    return m.lease_count == 0 && m.ns == meta.ns && m.generation == meta.generation &&
           m.state == BlockState::kReady;
  });
  if (gone) {
    FreeExtent(*gone);
    RecordDeparture(key, *gone, DepartureReason::kNamespaceDropped);
    counters_.removed_blocks.fetch_add(1);
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

index::LookupResult Store::Lookup(const NamespaceId& ns, std::span<const BlockKey> keys,
                                  bool count_later) {
  const std::optional<NamespaceRegistry::Entry> entry = namespaces_.Find(ns);
  if (!entry) return {};
  index::LookupResult result = index_->Lookup(keys, /*touch=*/true, ns);
  if (!count_later) CountLookupIn(*entry, keys.size(), result, 0);
  return result;
}

void Store::CountLookup(const NamespaceId& ns, size_t asked, const index::LookupResult& local,
                        size_t remote_found) {
  if (const std::optional<NamespaceRegistry::Entry> entry = namespaces_.Find(ns)) {
    CountLookupIn(*entry, asked, local, remote_found);
  }
}

void Store::CountLookupIn(const NamespaceRegistry::Entry& entry, size_t asked,
                          const index::LookupResult& local, size_t remote_found) {
  NamespaceCounters* c = entry.counters;
  // The blocks asked for first, and the hits and misses released after them: Stats acquires
  // those first and reads the blocks asked for last (see there).
  c->lookups.fetch_add(1, std::memory_order_relaxed);
  c->lookup_blocks.fetch_add(asked, std::memory_order_relaxed);
  // Counted here and added once per tier: an atomic add per block was a locked instruction per
  // key on the lookup path.
  std::array<uint64_t, kTierCount> hits{};
  for (TierId t : local.tiers) ++hits[static_cast<size_t>(t)];
  hits[static_cast<size_t>(TierId::kRemote)] += remote_found;
  for (size_t t = 0; t < kTierCount; ++t) {
    if (hits[t] != 0) c->hit_blocks[t].fetch_add(hits[t], std::memory_order_release);
  }
  const size_t found = local.ready_prefix + remote_found;
  if (asked > found) c->miss_blocks.fetch_add(asked - found, std::memory_order_release);
  c->hit_tokens.fetch_add(found * entry.tokens_per_block, std::memory_order_relaxed);
}

size_t Store::Refresh(const NamespaceId& ns, std::span<const BlockKey> keys) {
  if (!namespaces_.Find(ns)) return 0;
  return index_->Refresh(keys, ns);
}

Status Store::Remove(const NamespaceId& ns, const BlockKey& key) {
  NoteChangedDuringAdoption(ns, key);
  std::optional<BlockMeta> gone = index_->EraseIf(key, [&](const BlockMeta& m) {
    return m.VisibleIn(ns) && m.lease_count == 0;
  });
  if (!gone) {
    std::optional<BlockMeta> meta = index_->Get(key);
    if (meta && meta->VisibleIn(ns)) {
      return Busy("block is leased; remove it after the readers release it");
    }
    return NotFound("block not cached");
  }
  FreeExtent(*gone);
  RecordDeparture(key, *gone, DepartureReason::kRemoved);
  counters_.removed_blocks.fetch_add(1);
  return Status::Ok();
}

Store::RemoveAllResult Store::RemoveAll(const NamespaceId& ns) {
  RemoveAllResult result;
  for (const BlockKey& key : index_->KeysOfNamespace(ns)) {
    const Status removed = Remove(ns, key);
    if (removed.ok()) ++result.removed;
    if (removed.code() == StatusCode::kBusy) ++result.leased;
  }
  return result;
}

Status Store::Pin(const NamespaceId& ns, const BlockKey& key, uint64_t ttl_us) {
  const uint64_t until = ttl_us == 0 ? 0 : clock_.NowMicros() + ttl_us;
  return index_->Update(key, [&](BlockMeta& meta) {
    if (!meta.VisibleIn(ns)) return NotFound("block not cached");
    meta.pinned_until_us = until;
    return Status::Ok();
  });
}

void Store::Hold(const NamespaceId& ns, std::span<const BlockKey> keys, uint64_t ttl_us) {
  const uint64_t until = clock_.NowMicros() + ttl_us;
  for (const BlockKey& key : keys) {
    (void)index_->Update(key, [&](BlockMeta& meta) {
      if (!meta.VisibleIn(ns)) return NotFound("block not cached");
      meta.pinned_until_us = std::max(meta.pinned_until_us, until);
      return Status::Ok();
    });
  }
}

Result<uint64_t> Store::DropNamespace(const NamespaceId& ns) {
  // Blocks of it that the daemon adopts from disk after this must not come back, in this run
  // (the registry refuses them) or the next (the tiers drop them now).
  const bool adopting = pending_adoptions_.load(std::memory_order_relaxed) > 0;
  // Every block of `ns` made before this point has a lower generation: those the loop below
  // skips (leased, being written or moved) are removed when that ends (RemoveIfNamespaceDropped,
  // Publish), whether or not the namespace is registered again by then.
  const uint64_t watermark = next_id_.fetch_add(1);
  KVTIER_RETURN_IF_ERROR(namespaces_.Drop(ns, adopting, watermark));
  if (adopting) {
    for (tiers::Tier* t : tiers_) t->DropRecoveredCopies(ns, std::nullopt);
  }
  uint64_t removed = 0;
  // Only blocks made before the drop: the namespace may be registered again while this runs, and
  // what is put then is the new namespace's.
  const auto made_before = [&](const BlockMeta& m) {
    return m.ns == ns && m.generation < watermark;
  };
  for (const BlockKey& key : index_->KeysOfNamespace(ns)) {
    std::optional<BlockMeta> gone = index_->EraseIf(key, [&](const BlockMeta& m) {
      return made_before(m) && m.state == BlockState::kReady && m.lease_count == 0;
    });
    if (!gone) {
      // Leased or being moved: hidden now, removed when that ends. (One being written is
      // refused at its commit.)
      (void)index_->Update(key, [&](BlockMeta& m) {
        if (!made_before(m) || m.state != BlockState::kReady) return NotFound("not this drop's");
        m.dropped = true;
        return Status::Ok();
      });
      continue;
    }
    FreeExtent(*gone);
    RecordDeparture(key, *gone, DepartureReason::kNamespaceDropped);
    ++removed;
  }
  counters_.removed_blocks.fetch_add(removed);
  return removed;
}

size_t Store::ExpireDeadlines() {
  const uint64_t now = clock_.NowMicros();
  const auto [timed_out, released] =
      reservations_.Expire(now, kQuarantineFactor * options_.reservation_timeout_us);
  for (const ReservationRecord& r : timed_out) {
    ForgetWriting(r);
    counters_.expired_reservations.fetch_add(1);
    counters_.aborted_puts.fetch_add(1);
  }
  for (const ReservationRecord& r : released) tier(r.tier)->Free(r.extent);
  size_t expired = timed_out.size();
  const std::vector<LeaseRecord> expired_leases = leases_.TakeExpired(now);
  for (const LeaseRecord& lease : expired_leases) {
    EndLease(lease);
    counters_.expired_leases.fetch_add(1);
    ++expired;
  }
  return expired;
}

Status Store::AdoptBlock(TierId id, const NamespaceId& ns, const BlockKey& key,
                         const Extent& extent, std::optional<uint64_t> checksum) {
  if (LevelOf(id) >= tiers_.size()) {
    return InvalidArgument("cannot adopt a block of tier '" + std::string(TierName(id)) +
                           "': the store does not have it");
  }
  // Taken before the check below: a drop that runs between the check and the insert then has a
  // watermark above it, and the check after the insert sees it.
  const uint64_t generation = next_id_.fetch_add(1);
  if (namespaces_.AdoptionRefused(ns)) {
    return Rejected("namespace " + ns.ToHex() + " was dropped after the start");
  }
  // Held from the check to the insert: a Remove in between either comes first (and the copy is
  // refused) or finds the block inserted (and removes it).
  MutexLock adoption(adoption_mu_);
  if (changed_during_adoption_.contains(key)) {
    return Rejected("block removed or written again since the start");
  }
  BlockMeta meta;
  meta.ns = ns;
  meta.extent = extent;
  meta.tier = id;
  meta.state = BlockState::kReady;
  meta.generation = generation;
  meta.has_checksum = checksum.has_value();
  meta.checksum = checksum.value_or(0);
  {
    // The group of a namespace registered already; else 0 until it registers, which regroups
    // its blocks. Under the quota lock, so that no block slips in between that and the insert.
    MutexLock lock(quota_mu_);
    const std::optional<NamespaceRegistry::Entry> entry = namespaces_.Find(ns);
    meta.quota_group = entry ? entry->quota_group : 0;
    KVTIER_RETURN_IF_ERROR(index_->InsertReady(key, meta));
  }
  if (namespaces_.DroppedSince(ns, generation)) {
    // DropNamespace ran after the check above and its scan may have passed the key before the
    // insert. Taken back out unless already gone (leased at once: then its lease's end removes
    // it); the caller frees the copy on a refusal.
    const std::optional<BlockMeta> gone = index_->EraseIf(
        key, [&](const BlockMeta& m) { return m.generation == generation && m.lease_count == 0; });
    if (gone) return Rejected("namespace " + ns.ToHex() + " was dropped during the adoption");
  }
  counters_.adopted_blocks.fetch_add(1);
  return Status::Ok();
}

void Store::SetPendingAdoptions(uint64_t blocks) {
  pending_adoptions_.store(blocks, std::memory_order_relaxed);
  if (blocks != 0) return;
  MutexLock lock(adoption_mu_);
  changed_during_adoption_.clear();
}

void Store::NoteChangedDuringAdoption(const NamespaceId& ns, const BlockKey& key) {
  if (pending_adoptions_.load(std::memory_order_relaxed) == 0) return;
  {
    MutexLock lock(adoption_mu_);
    changed_during_adoption_.insert(key);
  }
  for (tiers::Tier* t : tiers_) t->DropRecoveredCopies(ns, key);
}

}  // namespace kvtier::store
