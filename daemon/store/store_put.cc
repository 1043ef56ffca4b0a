// The store's two-phase put path: reservations (BeginPut), publishing them (CommitPut, and
// CommitPutAs for a slot filled before its key was known), giving them back (AbortPut), the
// write-through of a committed block to NVMe, and the copy-in convenience Put.
#include <cstring>

#include "common/stream_copy.h"
#include "daemon/store/store.h"

namespace kvtier::store {

using index::BlockMeta;
using index::BlockState;

Result<Reservation> Store::BeginPut(const NamespaceId& ns, const BlockKey& key, uint64_t bytes) {
  std::optional<NamespaceRegistry::Entry> entry = namespaces_.Find(ns);
  if (!entry) return NotFound("namespace " + ns.ToHex() + " is not registered");
  if (bytes == 0) return InvalidArgument("a block cannot be empty");
  if (entry->block_bytes != 0 && bytes != entry->block_bytes) {
    return InvalidArgument("block of " + std::to_string(bytes) + " bytes in a namespace of " +
                           std::to_string(entry->block_bytes) + "-byte blocks");
  }
  // Cheap early answer for the common "already cached" case, before any space is touched.
  if (std::optional<BlockMeta> existing = index_->Get(key)) {
    // Never "already stored" for another namespace's block: the caller would skip its copy and
    // then never find the block, and the answer would tell one tenant what another has cached.
    if (existing->ns != ns) return Rejected("key is in use by another namespace");
    if (existing->dropped) return Busy("the block's namespace was dropped; it goes once read");
    if (existing->state == BlockState::kReady) return AlreadyExists("block is already stored");
    return Busy("block is being written by another client");
  }
  if (reservations_.Full()) {
    return Busy("too many puts in flight (" + std::to_string(reservations_.max()) + ")");
  }
  const TierId put_tier = tiers_[put_level_]->id();
  Result<Extent> extent = tiers_[put_level_]->Allocate(bytes);
  if (!extent.ok() && extent.status().code() == StatusCode::kBusy) {
    // Full, and room would be made by dropping blocks: the policy may judge that those are worth
    // more than this one (sticky, while the tier thrashes). The client then stops putting this
    // request's tail. Where victims move down a tier instead, the tier below decides (AdmitBelow).
    if (!LastTierAdmits(put_level_, key, entry->quota_group)) {
      return Rejected(std::string(TierName(put_tier)) +
                      " tier is full and its eviction policy keeps its blocks: they are more "
                      "likely to be read again soon than this one (store.eviction_policy)");
    }
    extent =
        DiskMovesInBackground(put_level_)
            ? AllocateOrAskForRoom(bytes, entry->quota_group)
            : AllocateWithEviction(put_level_, bytes, EvictionMode::kDemote, entry->quota_group);
  }
  if (!extent.ok()) {
    if (extent.status().code() == StatusCode::kBusy) counters_.busy_puts.fetch_add(1);
    return extent.status();
  }
  tiers::Tier& target = *tiers_[put_level_];
  Reservation reservation;
  reservation.id = next_id_.fetch_add(1);
  BlockMeta meta;
  meta.ns = ns;
  meta.tier = target.id();
  meta.extent = *extent;
  meta.generation = reservation.id;
  meta.quota_group = entry->quota_group;
  if (Status st = index_->InsertWriting(key, meta); !st.ok()) {
    target.Free(*extent);
    return st;
  }
  reservation.key = key;
  reservation.tier = target.id();
  reservation.extent = *extent;
  reservation.address = target.Address(*extent);
  reservations_.Add(reservation.id,
                    ReservationRecord{ns, key, target.id(), *extent, reservation.id,
                                      clock_.NowMicros() + options_.reservation_timeout_us});
  return reservation;
}

Result<ReservationRecord> Store::TakeReservation(uint64_t reservation_id, bool erase) {
  std::optional<ReservationRecord> record = reservations_.Find(reservation_id, erase);
  if (!record) {
    return NotFound("no reservation " + std::to_string(reservation_id) +
                    " (finished, aborted or timed out)");
  }
  if (erase && record->expired) {
    tier(record->tier)->Free(record->extent);
    return NotFound("reservation " + std::to_string(reservation_id) + " timed out");
  }
  return *record;
}

Status Store::CommitPut(uint64_t reservation_id, std::optional<uint64_t> checksum) {
  KVTIER_ASSIGN_OR_RETURN(const ReservationRecord record, TakeReservation(reservation_id, true));
  return Publish(record, checksum);
}

Status Store::CommitPutAs(uint64_t reservation_id, const BlockKey& key,
                          std::optional<uint64_t> checksum) {
  KVTIER_ASSIGN_OR_RETURN(ReservationRecord record, TakeReservation(reservation_id, false));
  // The usual conflict (the key's old block is still there) leaves the reservation alone, so the
  // caller can remove the old block and try again.
  if (std::optional<BlockMeta> existing = index_->Get(key); existing && !record.expired) {
    if (existing->ns != record.ns) return Rejected("key is in use by another namespace");
    return AlreadyExists("the key holds a block; remove it first");
  }
  KVTIER_ASSIGN_OR_RETURN(record, TakeReservation(reservation_id, true));
  // Move the writing entry from the staging key to `key`. The entry is invisible to readers in
  // between, so nobody sees the block under either key until Publish marks it ready.
  std::optional<BlockMeta> staged = index_->EraseIf(record.key, [&](const BlockMeta& m) {
    return m.state == BlockState::kWriting && m.generation == record.generation;
  });
  if (!staged) {
    tier(record.tier)->Free(record.extent);
    counters_.aborted_puts.fetch_add(1);
    return NotFound("reservation " + std::to_string(reservation_id) + " lost its entry");
  }
  if (Status st = index_->InsertWriting(key, *staged); !st.ok()) {
    // Another writer took the key between the check above and here.
    tier(record.tier)->Free(record.extent);
    counters_.aborted_puts.fetch_add(1);
    return Busy("the key was written concurrently: " + st.message());
  }
  record.key = key;
  return Publish(record, checksum);
}

Status Store::Publish(const ReservationRecord& record, std::optional<uint64_t> checksum) {
  NoteChangedDuringAdoption(record.ns, record.key);
  // Held: registered, and not dropped since the reservation (whose id is the block's generation)
  // even if registered again since. A put in flight at a drop is aborted, as DropNamespace says.
  if (!namespaces_.Holds(record.ns, record.generation)) {
    DiscardWriting(record);
    return NotFound("namespace " + record.ns.ToHex() + " was dropped during the put");
  }
  Status published = Status::Ok();
  if (checksum) {
    published = index_->Update(record.key, [&](BlockMeta& meta) {
      meta.checksum = *checksum;
      meta.has_checksum = true;
      return Status::Ok();
    });
  }
  if (published.ok()) published = index_->MarkReady(record.key);
  if (!published.ok()) {
    // The record is gone already: give the entry and its space back here, or both leak.
    DiscardWriting(record);
    return published;
  }
  counters_.committed_puts.fetch_add(1);
  if (!namespaces_.Holds(record.ns, record.generation)) {
    // DropNamespace ran between the check above and MarkReady and skipped this block while it was
    // being written: remove it now, as the drop would have.
    std::optional<BlockMeta> gone = index_->EraseIf(record.key, [&](const BlockMeta& m) {
      return m.generation == record.generation && m.lease_count == 0;
    });
    if (gone) {
      FreeExtent(*gone);
      counters_.removed_blocks.fetch_add(1);
    }
    return NotFound("namespace " + record.ns.ToHex() + " was dropped during the put");
  }
  if (NamespaceCounters* c = namespaces_.Counters(record.ns)) {
    c->puts.fetch_add(1, std::memory_order_relaxed);
    c->put_bytes.fetch_add(record.extent.length, std::memory_order_relaxed);
  }
  if (options_.nvme_write_through && record.tier == TierId::kHost) {
    const WriteThroughRequest request{record.key, record.generation};
    if (DiskMovesInBackground(put_level_)) {
      // The mover writes it; the caller waits for WriteThroughPending before it acknowledges.
      move_requests_.AskForWriteThrough(request.key, request.generation);
      if (wake_mover_) wake_mover_();
    } else {
      move_requests_.TrackWriteThrough(request.generation);
      WriteThrough({&request, 1});
    }
  }
  if (options_.remote.write_through && options_.remote.store != nullptr &&
      options_.background_disk_moves && !namespaces_.NodeLocal(record.ns)) {
    if (move_requests_.AskForRemoteWriteThrough(record.key, record.generation)) {
      if (wake_mover_) wake_mover_();
    } else {
      counters_.remote_write_through_skips.fetch_add(1);
    }
  }
  return Status::Ok();
}

bool Store::RenewReservation(uint64_t reservation_id) {
  return reservations_.Renew(reservation_id, clock_.NowMicros() + options_.reservation_timeout_us);
}

Status Store::AbortPut(uint64_t reservation_id) {
  std::optional<ReservationRecord> record = reservations_.Find(reservation_id, /*erase=*/true);
  if (!record) return NotFound("no reservation " + std::to_string(reservation_id));
  if (record->expired) {
    tier(record->tier)->Free(record->extent);  // its entry went at expiry; only the space was held
    return Status::Ok();
  }
  DiscardWriting(*record);
  return Status::Ok();
}

Status Store::AbandonPut(uint64_t reservation_id) {
  const uint64_t until = clock_.NowMicros() + kQuarantineFactor * options_.reservation_timeout_us;
  std::optional<ReservationRecord> record = reservations_.Quarantine(reservation_id, until);
  if (!record) {
    return reservations_.Find(reservation_id, /*erase=*/false)
               ? Status::Ok()
               : NotFound("no reservation " + std::to_string(reservation_id));
  }
  ForgetWriting(*record);  // as at a timeout: the extent is freed when the quarantine ends
  counters_.aborted_puts.fetch_add(1);
  return Status::Ok();
}

void Store::ForgetWriting(const ReservationRecord& record) {
  index_->EraseIf(record.key, [&](const BlockMeta& m) {
    return m.state == BlockState::kWriting && m.generation == record.generation;
  });
}

void Store::DiscardWriting(const ReservationRecord& record) {
  ForgetWriting(record);
  tier(record.tier)->Free(record.extent);
  counters_.aborted_puts.fetch_add(1);
}

Status Store::Put(const NamespaceId& ns, const BlockKey& key, std::span<const std::byte> bytes,
                  uint64_t* reservation_id) {
  KVTIER_ASSIGN_OR_RETURN(Reservation r, BeginPut(ns, key, bytes.size()));
  if (reservation_id != nullptr) *reservation_id = r.id;
  return FillAndCommit(r, bytes, std::nullopt);
}

Status Store::FillAndCommit(const Reservation& r, std::span<const std::byte> bytes,
                            std::optional<uint64_t> checksum) {
  Status written = r.address != nullptr
                       ? (StreamCopy(r.address, bytes.data(), bytes.size()), Status::Ok())
                       : tier(r.tier)->Write(r.extent, bytes);
  if (!written.ok()) {
    (void)AbortPut(r.id);
    return written;
  }
  return CommitPut(r.id, checksum);
}

void Store::WriteThrough(std::span<const WriteThroughRequest> requests) {
  const size_t level = LevelOf(TierId::kNvme);
  std::vector<PinnedMove> copies;
  for (const WriteThroughRequest& r : requests) {
    Status outcome;
    if (level < tiers_.size()) {
      if (std::optional<PinnedMove> copy = PrepareWriteThrough(level, r, outcome)) {
        copies.push_back(*std::move(copy));
        continue;
      }
    }
    move_requests_.FinishWriteThrough(r.generation, std::move(outcome));
  }
  if (!copies.empty()) {
    // One batch to NVMe: the commits waiting for these copies all hear of them together.
    tiers::Tier& nvme = *tiers_[level];
    CopyBatch(*tier(TierId::kHost), nvme, copies, /*must_survive_restart=*/true);
    for (const PinnedMove& copy : copies) {
      move_requests_.FinishWriteThrough(copy.meta.generation, AttachWriteThrough(nvme, copy));
    }
  }
  if (!requests.empty()) move_requests_.NotifyMoved();
}

std::optional<Store::PinnedMove> Store::PrepareWriteThrough(size_t level,
                                                            const WriteThroughRequest& r,
                                                            Status& outcome) {
  // Pinned as a reader pins it, so readers that lease a block just committed do not keep its copy
  // from being made: only its bytes are read, and they never change.
  BlockMeta meta;
  std::optional<Extent> on_nvme;
  Status pinned = index_->Update(r.key, [&](BlockMeta& m) {
    if (m.generation != r.generation) return NotFound("block changed");  // nothing owed now
    if (m.tier == TierId::kNvme || m.has_shadow) {
      // Demoted before its copy was made, and perhaps read up again since with its NVMe copy
      // kept: written as cache, that copy is the one the put is owed, once it is made one that
      // a restart finds (a cache write's record may have failed, and cache copies sync late).
      on_nvme = m.tier == TierId::kNvme ? m.extent : m.shadow;
      return NotFound("on NVMe");
    }
    if (m.state != BlockState::kReady || m.tier != TierId::kHost) {
      return Busy("it left the host tier for " + std::string(TierName(m.tier)) +
                  " before its copy to NVMe was made");
    }
    ++m.lease_count;
    meta = m;
    return Status::Ok();
  });
  if (on_nvme) {
    outcome = tier(TierId::kNvme)->MustSurviveRestart(*on_nvme);
    // Gone from NVMe as well since (evicted): as if it went after the acknowledgement.
    if (outcome.code() == StatusCode::kNotFound) outcome = Status::Ok();
    if (!outcome.ok()) counters_.write_through_failures.fetch_add(1);
    return std::nullopt;
  }
  if (!pinned.ok()) {
    // Gone: replaced or removed (no copy is owed), or evicted, when SettleEviction has told the
    // put already. Elsewhere (the GPU tier), it is in memory only.
    if (pinned.code() != StatusCode::kNotFound) {
      counters_.write_through_failures.fetch_add(1);
      outcome = pinned;
    }
    return std::nullopt;
  }
  Result<Extent> dst =
      AllocateWithEviction(level, meta.extent.length, EvictionMode::kDemote, meta.quota_group);
  if (!dst.ok()) {
    UnpinAfterMove(r.key);
    counters_.write_through_failures.fetch_add(1);
    outcome =
        Status(dst.status().code(), "no room for its copy on NVMe: " + dst.status().message());
    return std::nullopt;
  }
  return PinnedMove{r.key, meta, *dst, {}};
}

Status Store::AttachWriteThrough(tiers::Tier& nvme, const PinnedMove& copy) {
  bool attached = false;
  if (copy.status.ok()) {
    attached = index_
                   ->Update(copy.key,
                            [&](BlockMeta& m) {
                              if (m.generation != copy.meta.generation || m.has_shadow) {
                                return NotFound("block changed");
                              }
                              m.shadow = copy.dst;
                              m.has_shadow = true;
                              return Status::Ok();
                            })
                   .ok();
  }
  UnpinAfterMove(copy.key);
  if (attached) {
    counters_.write_throughs.fetch_add(1);
    return Status::Ok();
  }
  nvme.Free(copy.dst);
  if (copy.status.ok()) return Status::Ok();  // the block changed: its copy is not needed
  counters_.write_through_failures.fetch_add(1);
  return Status(copy.status.code(), "its copy to NVMe failed: " + copy.status.message());
}

}  // namespace kvtier::store
