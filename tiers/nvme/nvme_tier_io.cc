// NvmeTier's data path: writing and reading blocks, alone or in batches, and the catalog records
// that follow a write or a read.
//
// Every block travels as a plan of up to three requests (record header, aligned payload, unaligned
// tail: block_io.h). A batch puts the plans of all its blocks into one IoBackend::Submit, so the
// device sees them together (io_uring keeps up to its queue depth in flight) instead of one block
// at a time; each block is then finished on its own, exactly as a single WriteBlock/ReadBlock
// would finish it.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "tiers/nvme/block_io.h"
#include "tiers/nvme/nvme_format.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::tiers::nvme {

// One block of a batch between planning and finishing: its plan and where its requests sit in the
// batch's request list.
struct NvmeTier::PlannedIo {
  size_t block = 0;  // index in the caller's span
  Entry entry;
  BlockIo plan;
  const DataFile* file = nullptr;
  size_t first_request = 0;
};

// The first failed request of a planned block, counted as a device error; OK when all succeeded.
Status NvmeTier::IoStatus(const PlannedIo& p, std::span<const IoRequest> requests) {
  for (size_t i = 0; i < p.plan.count; ++i) {
    const Status& st = requests[p.first_request + i].status;
    if (!st.ok()) {
      ++io_errors_;
      return st;
    }
  }
  return Status::Ok();
}

void NvmeTier::SubmitPlanned(std::span<PlannedIo> planned, std::vector<IoRequest>& requests) {
  requests.clear();
  for (PlannedIo& p : planned) {
    p.first_request = requests.size();
    for (const IoRequest& r : p.plan.batch()) requests.push_back(r);
  }
  io_->Submit(requests);
}

Status NvmeTier::WriteBlock(const Extent& extent, const BlockIdentity& id,
                            std::span<const std::byte> src) {
  BlockWrite w{extent, id, src, {}};
  WriteBatch({&w, 1}, /*durable=*/true);
  return w.status;
}

Status NvmeTier::Write(const Extent& extent, std::span<const std::byte> src) {
  BlockWrite w{extent, BlockIdentity{}, src, {}};
  WriteBatch({&w, 1}, /*durable=*/false);
  return w.status;
}

void NvmeTier::WriteBlocks(std::span<BlockWrite> writes) { WriteBatch(writes, /*durable=*/true); }

void NvmeTier::WriteBatch(std::span<BlockWrite> writes, bool durable) {
  // Per thread, so that a warm mover allocates nothing per batch.
  thread_local std::vector<PlannedIo> planned;
  thread_local std::vector<IoRequest> requests;
  planned.clear();
  for (size_t i = 0; i < writes.size(); ++i) {
    PlannedIo p{.block = i};
    writes[i].status = PlanBlockWrite(writes[i], durable, planned.size(), p);
    if (writes[i].status.ok()) planned.push_back(p);
  }
  if (planned.empty()) return;
  SubmitPlanned(planned, requests);
  for (PlannedIo& p : planned) {
    const BlockWrite& w = writes[p.block];
    writes[p.block].status = FinishWrite(w.extent, w.must_survive_restart, p, requests);
  }
}

Status NvmeTier::PlanBlockWrite(const BlockWrite& w, bool durable, size_t slot, PlannedIo& p) {
  if (w.src.empty() || w.src.size() > w.extent.length) {
    return InvalidArgument("nvme: write of " + std::to_string(w.src.size()) +
                           " bytes into an extent of " + std::to_string(w.extent.length));
  }
  std::optional<Entry> held;
  {
    // A rewrite of the extent invalidates what it held until the new block is complete.
    MutexLock lock(mu_);
    if (!allocator_.IsLive(w.extent)) {
      return InvalidArgument("nvme: write to an unallocated extent");
    }
    held = TakeBlock(w.extent.offset);
  }
  // The block it held goes as at a Free, and its record with it: left naming the extent, that
  // record would outlive a failed rewrite and a later Free, and compete with the new block's at
  // the restart.
  ReleaseRecordOf(held, w.extent);
  p.entry = Entry{w.identity, w.src.size(), PayloadChecksum(w.src), durable};
  Place place = Locate(w.extent.offset);
  p.file = place.file;
  p.plan = PlanWrite(place.file->fd(), place.at, w.src, slot);
  EncodeRecordHeader({w.identity.ns, w.identity.key, p.entry.payload_bytes, p.entry.checksum,
                      place.file->superblock().file_id},
                     p.plan.header);
  return Status::Ok();
}

Status NvmeTier::FinishWrite(const Extent& extent, bool must_survive_restart, PlannedIo& p,
                             std::span<const IoRequest> requests) {
  KVTIER_RETURN_IF_ERROR(IoStatus(p, requests));
  device_bytes_written_ += p.plan.device_bytes;
  if (options_.sync_writes) KVTIER_RETURN_IF_ERROR(io_->Sync(p.file->fd()));
  if (p.entry.durable) {
    // The record and the block's entry change under one hold of catalog_mu_: in between, the
    // Free of a newer copy that took the record over would look for this copy in blocks_, not
    // find it, and delete the record instead of passing it back (PassRecordOn).
    CatalogHold catalog_hold(*this);
    // A block the catalog cannot record is served until the restart and gone after it: kept as
    // such, except a copy the caller acknowledges as durable (a write-through copy), which fails.
    Status recorded = PutRecordLocked(extent.offset, p.entry, /*access=*/false);
    if (!recorded.ok() && must_survive_restart) return recorded;
    p.entry.durable = recorded.ok();
    p.entry.older_copies = recorded.ok() && other_copies_.contains(p.entry.id);
    MutexLock lock(mu_);
    blocks_[extent.offset] = p.entry;
  } else {
    MutexLock lock(mu_);
    blocks_[extent.offset] = p.entry;
  }
  if (p.entry.durable && options_.record_put_hook) options_.record_put_hook(extent);
  ++writes_;
  bytes_admitted_ += p.entry.payload_bytes;
  unsynced_blocks_.fetch_add(1, std::memory_order_acq_rel);
  if (must_survive_restart) unsynced_acknowledged_.fetch_add(1, std::memory_order_acq_rel);
  return Status::Ok();
}

// Puts (or refreshes) the catalog record of the block at `offset`, unless a newer copy of the same
// block owns the record by now (a refresh after a read).
void NvmeTier::RecordUse(const Extent& extent) {
  Entry entry;
  {
    MutexLock lock(mu_);
    auto it = blocks_.find(extent.offset);
    if (it == blocks_.end() || !it->second.durable) return;
    entry = it->second;
  }
  (void)PutRecord(extent.offset, entry, /*access=*/true);  // a lost refresh costs only recency
}

Status NvmeTier::MustSurviveRestart(const Extent& extent) {
  {
    MutexLock lock(mu_);
    auto it = blocks_.find(extent.offset);
    if (it == blocks_.end()) return NotFound("nvme: no block at that extent");
    if (!it->second.durable) {
      return DeviceError(
          "nvme: the catalog holds no record of the block, so a restart would not "
          "find it");
    }
  }
  // Synced already when every write is: nothing waits.
  if (!options_.sync_writes) unsynced_acknowledged_.fetch_add(1, std::memory_order_acq_rel);
  return Status::Ok();
}

Status NvmeTier::PutRecord(uint64_t offset, const Entry& entry, bool access) {
  CatalogHold hold(*this);
  return PutRecordLocked(offset, entry, access);
}

Status NvmeTier::PutRecordLocked(uint64_t offset, const Entry& entry, bool access) {
  auto owner = owner_.find(entry.id);
  if (access && (owner == owner_.end() || owner->second != offset)) return Status::Ok();
  if (access && !StillHolds(offset, entry)) return Status::Ok();
  if (!access && !undeleted_.empty()) {
    RetryUndeletedRecords(Catalog::Stall::kWait);
    if (OverlapsUndeleted(offset, entry)) {
      ++catalog_errors_;
      return DeviceError("nvme: a record that could not be deleted still names this extent");
    }
  }
  // Strictly increasing within a run, so that two uses in the same microsecond keep their order
  // at the restart.
  last_record_us_ = std::max(UnixMicros(), last_record_us_ + 1);
  CatalogRecord rec{entry.id.ns,         entry.id.key,   offset,
                    entry.payload_bytes, entry.checksum, last_record_us_};
  Status st = catalog_->Put(rec);
  if (!st.ok()) {
    ++catalog_errors_;
    spdlog::warn("nvme: catalog put failed: {}", st.ToString());
    return DeviceError("nvme: the catalog did not record the block: " + st.message());
  }
  if (access) return Status::Ok();
  // Only a record in the catalog is the block's: Free deletes what it owns. A copy that held it
  // before and is still live (its Free would have taken it out of owner_) may get it back.
  if (owner != owner_.end() && owner->second != offset)
    other_copies_.emplace(entry.id, owner->second);
  owner_[entry.id] = offset;
  ForgetCopy(entry.id, offset);
  // A record of this block that could not be deleted is replaced by this one.
  std::erase_if(undeleted_, [&](const Undeleted& u) { return u.id == entry.id; });
  return Status::Ok();
}

// A refresh comes after a read (or a use) of `entry`, which may have gone since: a lease that
// lapsed mid-read lets the block be freed, and another of the same key may have taken its extent
// and its record. That record must keep the new block's size and checksum, or the new block fails
// its header check at the restart. Blocks change under catalog_mu_ (FinishWrite), which the
// caller holds.
bool NvmeTier::StillHolds(uint64_t offset, const Entry& entry) const {
  MutexLock lock(mu_);
  auto it = blocks_.find(offset);
  return it != blocks_.end() && it->second.id == entry.id &&
         it->second.payload_bytes == entry.payload_bytes && it->second.checksum == entry.checksum;
}

Status NvmeTier::ReadBlock(const Extent& extent, const BlockIdentity& id,
                           std::span<std::byte> dst) {
  BlockRead r{extent, id, dst, {}};
  ReadBatch({&r, 1}, /*check_identity=*/true);
  return r.status;
}

Status NvmeTier::Read(const Extent& extent, std::span<std::byte> dst) {
  BlockRead r{extent, BlockIdentity{}, dst, {}};
  ReadBatch({&r, 1}, /*check_identity=*/false);
  return r.status;
}

void NvmeTier::ReadBlocks(std::span<BlockRead> reads) { ReadBatch(reads, true); }

void NvmeTier::ReadBatch(std::span<BlockRead> reads, bool check_identity) {
  thread_local std::vector<PlannedIo> planned;
  thread_local std::vector<IoRequest> requests;
  planned.clear();
  // Reads of a block's first bytes only need the whole block for its checksum: they go one by one
  // through ReadPrefix after the batch, which has planned into the same staging slots.
  std::vector<std::pair<size_t, Entry>> prefixes;
  for (size_t i = 0; i < reads.size(); ++i) {
    BlockRead& r = reads[i];
    Result<Entry> expected = ExpectedAt(r, check_identity);
    if (!expected.ok()) {
      r.status = expected.status();
    } else if (r.dst.size() < expected->payload_bytes) {
      prefixes.emplace_back(i, *expected);
    } else {
      planned.push_back(PlanBlockRead(r, *expected, i, planned.size()));
    }
  }
  if (!planned.empty()) SubmitPlanned(planned, requests);
  for (const PlannedIo& p : planned) {
    // Read (no identity) is the checksummed plain path: it leaves recency alone.
    reads[p.block].status = FinishBlockRead(reads[p.block], p, requests, check_identity);
  }
  for (const auto& [i, expected] : prefixes) {
    reads[i].status = ReadPrefix(reads[i], expected, check_identity, requests);
  }
}

// Block `block` of a batch, the whole of which r.dst takes, read into staging slot `slot`.
NvmeTier::PlannedIo NvmeTier::PlanBlockRead(const BlockRead& r, const Entry& expected, size_t block,
                                            size_t slot) {
  const Place place = Locate(r.extent.offset);
  return PlannedIo{.block = block,
                   .entry = expected,
                   .plan = PlanRead(place.file->fd(), place.at, r.dst, slot),
                   .file = place.file};
}

// What the block at r.extent must be: the tier's record of it, with the caller's identity (the
// one checked against the disk) when check_identity.
Result<NvmeTier::Entry> NvmeTier::ExpectedAt(const BlockRead& r, bool check_identity) {
  Entry expected;
  {
    MutexLock lock(mu_);
    auto it = blocks_.find(r.extent.offset);
    if (it == blocks_.end()) return NotFound("nvme: no block stored at this extent");
    expected = it->second;
  }
  if (check_identity) expected.id = r.identity;
  if (r.dst.size() > expected.payload_bytes) {
    return InvalidArgument("nvme: read of " + std::to_string(r.dst.size()) +
                           " bytes of a block of " + std::to_string(expected.payload_bytes));
  }
  return expected;
}

Status NvmeTier::FinishBlockRead(const BlockRead& r, const PlannedIo& p,
                                 std::span<const IoRequest> requests, bool record_access) {
  KVTIER_RETURN_IF_ERROR(IoStatus(p, requests));
  FinishRead(p.plan);
  KVTIER_RETURN_IF_ERROR(VerifyRead(r.extent, p.entry, p.plan.header, r.dst));
  ++reads_;
  bytes_read_ += r.dst.size();
  if (record_access && p.entry.durable && options_.record_access_on_read) {
    (void)PutRecord(r.extent.offset, p.entry, /*access=*/true);  // a lost refresh costs recency
  }
  return Status::Ok();
}

// A prefix (Tier::Read's contract): the checksum needs the whole payload, so the whole block is
// read into a per-thread buffer and the prefix copied out. `expected` is what the batch found at
// the extent; `requests` is the batch's list, done with by now.
Status NvmeTier::ReadPrefix(const BlockRead& r, const Entry& expected, bool record_access,
                            std::vector<IoRequest>& requests) {
  thread_local AlignedBuffer whole;
  if (whole.size() < expected.payload_bytes) whole = AlignedBuffer(expected.payload_bytes);
  if (whole.data() == nullptr) return Busy("nvme: out of memory for a partial read");
  const BlockRead all{r.extent, expected.id, {whole.data(), expected.payload_bytes}, {}};
  PlannedIo p = PlanBlockRead(all, expected, /*block=*/0, /*slot=*/0);
  SubmitPlanned({&p, 1}, requests);
  KVTIER_RETURN_IF_ERROR(FinishBlockRead(all, p, requests, record_access));
  std::memcpy(r.dst.data(), whole.data(), r.dst.size());
  return Status::Ok();
}

Status NvmeTier::VerifyRead(const Extent& extent, const Entry& expected,
                            std::span<const std::byte> header, std::span<const std::byte> payload) {
  Result<RecordHeader> h = DecodeRecordHeader(header);
  if (!h.ok()) return ChecksumFailure(extent, h.status().message());
  if (h->ns != expected.id.ns || h->key != expected.id.key ||
      h->file_id != Locate(extent.offset).file->superblock().file_id) {
    return ChecksumFailure(extent, "record header names another block");
  }
  if (h->payload_bytes != expected.payload_bytes || h->payload_checksum != expected.checksum) {
    return ChecksumFailure(extent, "record header disagrees with the catalog");
  }
  if (PayloadChecksum(payload) != expected.checksum) {
    return ChecksumFailure(extent, "payload checksum mismatch");
  }
  return Status::Ok();
}

Status NvmeTier::ChecksumFailure(const Extent& extent, const std::string& why) {
  ++checksum_failures_;
  Place place = Locate(extent.offset);
  std::string msg =
      "nvme: block at " + place.file->path() + " offset " + std::to_string(place.at) + ": " + why;
  spdlog::warn("{}; dropping it", msg);
  return ChecksumMismatch(std::move(msg));
}

}  // namespace kvtier::tiers::nvme
