#include "tiers/nvme/nvme_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <system_error>

#include "tiers/nvme/nvme_format.h"

namespace kvtier::tiers::nvme {
namespace {

namespace fs = std::filesystem;

Status ValidateOptions(const NvmeTier::Options& o) {
  if (o.data_dir.empty()) return InvalidArgument("nvme data_dir must not be empty");
  if (o.capacity_bytes < 2 * kBlockAlignment) {
    return InvalidArgument("nvme capacity_bytes must be at least 8192, not " +
                           std::to_string(o.capacity_bytes));
  }
  std::set<std::string> unique(o.data_paths.begin(), o.data_paths.end());
  if (unique.size() != o.data_paths.size() || unique.count("") > 0) {
    return InvalidArgument("nvme data_paths must be distinct and non-empty");
  }
  if (!o.data_paths.empty() && o.capacity_bytes / o.data_paths.size() < 2 * kBlockAlignment) {
    return InvalidArgument("nvme capacity_bytes is too small for " +
                           std::to_string(o.data_paths.size()) + " data_paths");
  }
  if ((o.registered_region == nullptr) != (o.registered_region_bytes == 0)) {
    return InvalidArgument("nvme registered_region and registered_region_bytes go together");
  }
  return Status::Ok();
}

// Creates the directory, locks it for this process (`lock`), and honours a forced cold start
// (option or marker file). Returns whether a cold start was forced.
Result<bool> PrepareDirectory(const NvmeTier::Options& o, std::unique_ptr<DirectoryLock>& lock) {
  std::error_code ec;
  fs::create_directories(o.data_dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "create nvme data_dir " + o.data_dir);
  KVTIER_ASSIGN_OR_RETURN(lock, DirectoryLock::Acquire(o.data_dir));
  fs::path dir(o.data_dir);
  bool marker = fs::exists(dir / NvmeTier::kColdStartMarker, ec);
  if (!o.cold_start && !marker) return false;
  spdlog::info("nvme: cold start requested ({}); wiping {}", marker ? "marker file" : "option",
               o.data_dir);
  // The data files are formatted afresh by DataFile::Open (a device is never removed).
  KVTIER_RETURN_IF_ERROR(Catalog::Destroy((dir / NvmeTier::kCatalogDirName).string()));
  fs::remove_all(dir / NvmeTier::kCatalogDirName, ec);
  if (marker) fs::remove(dir / NvmeTier::kColdStartMarker, ec);
  return true;
}

// Opens the catalog. One damaged beyond RocksDB's own recovery is a lost index, not a reason to
// refuse to start: it is destroyed (an error in the log) and the tier starts cold.
Result<std::unique_ptr<Catalog>> OpenCatalog(const NvmeTier::Options& o) {
  Catalog::Options co{.path = (fs::path(o.data_dir) / NvmeTier::kCatalogDirName).string(),
                      .env = o.catalog_env,
                      .sync_writes = o.sync_writes};
  Result<std::unique_ptr<Catalog>> catalog = Catalog::Open(co);
  if (catalog.ok() || catalog.status().code() != StatusCode::kCorruption) return catalog;
  spdlog::error("nvme: {}; discarding the catalog (the NVMe cache starts cold)",
                catalog.status().ToString());
  KVTIER_RETURN_IF_ERROR(Catalog::Destroy(co.path));
  return Catalog::Open(co);
}

Result<std::vector<std::unique_ptr<DataFile>>> OpenDataFiles(const NvmeTier::Options& o,
                                                             const std::vector<std::string>& paths,
                                                             bool cold, bool keep_capacity) {
  std::vector<std::unique_ptr<DataFile>> files;
  for (const std::string& path : paths) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<DataFile> file,
                            DataFile::Open({.path = path,
                                            .capacity_bytes = o.capacity_bytes / paths.size(),
                                            .direct_io = o.direct_io,
                                            .reformat = cold,
                                            .keep_formatted_capacity = keep_capacity}));
    files.push_back(std::move(file));
  }
  return files;
}

}  // namespace

Result<std::unique_ptr<NvmeTier>> NvmeTier::Open(const Options& options,
                                                 std::unique_ptr<IoBackend> backend) {
  KVTIER_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<DirectoryLock> dir_lock;
  KVTIER_ASSIGN_OR_RETURN(bool cold, PrepareDirectory(options, dir_lock));
  std::vector<std::string> paths = options.data_paths;
  if (paths.empty()) paths.push_back((fs::path(options.data_dir) / kDataFileName).string());
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<DataFile>> files,
                          OpenDataFiles(options, paths, cold, options.keep_formatted_capacity));
  // Consecutive blocks go to different files, so all must be alike: files that kept unlike
  // capacities (one replaced, say) are all formatted to the configured one.
  for (const auto& file : files) {
    if (file->capacity_bytes() == files.front()->capacity_bytes()) continue;
    spdlog::warn(
        "nvme: the data files were formatted for unlike capacities; those not of {} bytes are "
        "reformatted",
        options.capacity_bytes / paths.size());
    files.clear();
    KVTIER_ASSIGN_OR_RETURN(files, OpenDataFiles(options, paths, cold, false));
    break;
  }
  if (backend == nullptr) {
    KVTIER_ASSIGN_OR_RETURN(backend, MakeIoBackend(options.io));
  }
  if (options.registered_region != nullptr) {
    Status st = backend->RegisterRegion(options.registered_region, options.registered_region_bytes);
    if (!st.ok()) spdlog::warn("nvme: zero-copy buffers unavailable: {}", st.ToString());
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Catalog> catalog, OpenCatalog(options));
  std::unique_ptr<NvmeTier> tier(
      new NvmeTier(options, std::move(files), std::move(backend), std::move(catalog)));
  tier->dir_lock_ = std::move(dir_lock);
  KVTIER_RETURN_IF_ERROR(tier->Recover());
  return tier;
}

NvmeTier::NvmeTier(const Options& options, std::vector<std::unique_ptr<DataFile>> files,
                   std::unique_ptr<IoBackend> backend, std::unique_ptr<Catalog> catalog)
    : options_(options),
      files_(std::move(files)),
      segment_bytes_(files_.front()->capacity_bytes()),
      io_(std::move(backend)),
      catalog_(std::move(catalog)),
      allocator_(segment_bytes_, static_cast<uint32_t>(files_.size())) {}

NvmeTier::Place NvmeTier::Locate(uint64_t offset) const {
  const DataFile& f = *files_[offset / segment_bytes_];
  return {&f, f.data_offset() + offset % segment_bytes_};
}

uint64_t NvmeTier::CombinedFileId() const {
  if (files_.size() == 1) return files_.front()->superblock().file_id;
  uint64_t id = files_.size();
  for (const auto& f : files_) id = (id ^ f->superblock().file_id) * 0x9E3779B97F4A7C15ULL;
  return id;
}

NvmeTier::~NvmeTier() {
  // The releases still queued, and the deletes put off: their records go before the catalog
  // closes.
  CatalogHold hold(*this);
  RetryUndeletedRecords(Catalog::Stall::kWait);
}

// Loads the catalog and keeps the records whose extent is sane. A catalog written for another
// formatting of the data file (or none) is emptied first.
//
// Nothing is read from the data file here: a restart costs one scan of the catalog, not a read per
// block (4 GiB of record headers for a million blocks). Each block's record header and payload are
// checked on its first read instead, as on every read (VerifyRead), so a record whose data did not
// survive is a miss then, and is dropped, never served.
Status NvmeTier::Recover() {
  KVTIER_ASSIGN_OR_RETURN(std::optional<uint64_t> meta, catalog_->ReadMeta());
  uint64_t file_id = CombinedFileId();
  if (!meta.has_value() || *meta != file_id) {
    if (meta.has_value()) {
      spdlog::warn(
          "nvme: the catalog in {} describes other data files or another formatting of "
          "them; starting cold",
          options_.data_dir);
    }
    KVTIER_RETURN_IF_ERROR(catalog_->DeleteAllRecords());
    KVTIER_RETURN_IF_ERROR(catalog_->WriteMeta(file_id));
    return Status::Ok();
  }
  Result<Catalog::Loaded> load = catalog_->Load();
  if (!load.ok() && load.status().code() == StatusCode::kCorruption) {
    spdlog::error("nvme: {}; discarding the catalog's records", load.status().ToString());
    return catalog_->DeleteAllRecords();
  }
  KVTIER_ASSIGN_OR_RETURN(Catalog::Loaded loaded, std::move(load));
  dropped_at_recovery_ += loaded.undecodable;
  ClaimRecords(loaded.records);
  MutexLock lock(mu_);
  std::sort(recovered_.begin(), recovered_.end(), [](const auto& a, const auto& b) {
    return a.last_access_unix_us < b.last_access_unix_us;
  });
  recovered_blocks_ = recovered_.size();
  if (dropped_at_recovery_ > 0 || !recovered_.empty()) {
    spdlog::info("nvme: recovered {} blocks from {}, dropped {} catalog records", recovered_.size(),
                 options_.data_dir, dropped_at_recovery_.load());
  }
  return Status::Ok();
}

// Adopts each record whose extent can be claimed (inside the region, not overlapping a kept one)
// and drops the others.
void NvmeTier::ClaimRecords(std::span<const CatalogRecord> records) {
  std::vector<bool> claimed(records.size());
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < records.size(); ++i) {
      claimed[i] = allocator_.Claim({records[i].offset, records[i].payload_bytes}).ok();
    }
  }
  std::vector<const CatalogRecord*> dropped;
  {
    CatalogHold catalog_hold(*this);
    MutexLock lock(mu_);
    owner_.reserve(owner_.size() + records.size());
    blocks_.reserve(blocks_.size() + records.size());
    recovered_.reserve(recovered_.size() + records.size());
    for (size_t i = 0; i < records.size(); ++i) {
      const CatalogRecord& r = records[i];
      if (!claimed[i]) {
        dropped.push_back(&r);
        continue;
      }
      BlockIdentity id{r.ns, r.key};
      owner_[id] = r.offset;
      blocks_[r.offset] = Entry{id, r.payload_bytes, r.payload_checksum, /*durable=*/true,
                                /*awaiting_adoption=*/true};
      awaiting_adoption_[id] = r.offset;
      recovered_.push_back(
          {r.ns, r.key, {r.offset, r.payload_bytes}, r.payload_checksum, r.last_access_unix_us});
    }
  }
  for (const CatalogRecord* r : dropped) Drop(*r, /*claimed=*/false);
}

void NvmeTier::Drop(const CatalogRecord& r, bool claimed) {
  ++dropped_at_recovery_;
  if (claimed) {
    MutexLock lock(mu_);
    (void)allocator_.Free({r.offset, r.payload_bytes});
  }
  CatalogHold hold(*this);
  if (catalog_->Delete(r.ns, r.key).ok()) return;
  ++catalog_errors_;
  // Unclaimed, it overlaps a kept block; the free space around may be reused in this run.
  undeleted_.push_back({{r.ns, r.key}, {r.offset, r.payload_bytes}});
}

std::vector<RecoveredBlock> NvmeTier::TakeRecovered() {
  MutexLock lock(mu_);
  return std::move(recovered_);
}

bool NvmeTier::SettleRecovered(const Extent& extent) {
  MutexLock lock(mu_);
  auto it = blocks_.find(extent.offset);
  if (it == blocks_.end() || !it->second.awaiting_adoption) return false;
  it->second.awaiting_adoption = false;
  awaiting_adoption_.erase(it->second.id);
  if (awaiting_adoption_.empty()) awaiting_adoption_ = {};  // its buckets, sized for every block
  return true;
}

void NvmeTier::DropRecoveredCopies(const NamespaceId& ns, const std::optional<BlockKey>& key) {
  // Called on a network thread (a DEL, a DROP while a restart's blocks are adopted): under mu_
  // alone, never behind a catalog write.
  std::vector<Extent> dropped;
  {
    MutexLock lock(mu_);
    std::vector<uint64_t> offsets;
    if (key) {
      auto it = awaiting_adoption_.find(BlockIdentity{ns, *key});
      if (it != awaiting_adoption_.end()) offsets.push_back(it->second);
    } else {
      for (const auto& [offset, entry] : blocks_) {
        if (entry.awaiting_adoption && entry.id.ns == ns) offsets.push_back(offset);
      }
    }
    for (const uint64_t offset : offsets) {
      auto it = blocks_.find(offset);
      if (it == blocks_.end() || !it->second.awaiting_adoption || !(it->second.id.ns == ns) ||
          (key && !(it->second.id.key == *key))) {
        continue;
      }
      it->second.awaiting_adoption = false;  // settled here: the adoption leaves it alone
      awaiting_adoption_.erase(it->second.id);
      dropped.push_back({offset, it->second.payload_bytes});
    }
  }
  for (const Extent& extent : dropped) Free(extent);
}

Result<Extent> NvmeTier::Allocate(uint64_t bytes) {
  MutexLock lock(mu_);
  return allocator_.Allocate(bytes);
}

void NvmeTier::Free(const Extent& extent) {
  std::optional<Entry> held;
  {
    MutexLock lock(mu_);
    // A stale extent (freed already, or of another length) says nothing about the block at its
    // offset now, which may be another one's: it is counted and touches nothing.
    if (!allocator_.IsLive(extent)) {
      ++invalid_frees_;
      return;
    }
    held = TakeBlock(extent.offset);
  }
  if (options_.sync_writes || (held && held->older_copies)) {
    // The operator chose durability: the delete is synced before the extent is reused. Or the
    // record may pass back to an older copy, which must happen before the extent is reused.
    ReleaseRecordOf(held, extent);
  } else if (held && held->durable) {
    // Not behind a holder of the catalog, whose put may wait out a RocksDB stall: it releases
    // the record before any put of its own (CatalogHold), so a reuse of the extent cannot be
    // recorded first (docs/nvme-format.md).
    {
      MutexLock lock(queue_mu_);
      queued_releases_.push_back({held->id, {extent.offset, extent.length}});
    }
    // (A try_lock that fails spuriously, which the standard allows and glibc does not do, would
    // leave the release to the next holder of the catalog.)
    if (catalog_mu_.TryLock()) UnlockCatalog();
  }
  MutexLock lock(mu_);
  if (!allocator_.Free(extent).ok()) ++invalid_frees_;
}

NvmeTier::CatalogHold::CatalogHold(NvmeTier& tier) : tier_(tier) {
  tier_.catalog_mu_.Lock();
  tier_.ReleaseQueuedRecords();
}

NvmeTier::CatalogHold::~CatalogHold() { tier_.UnlockCatalog(); }

void NvmeTier::UnlockCatalog() {
  ReleaseQueuedRecords();
  catalog_mu_.Unlock();
  // A Free that queued after the line above and found the lock still held left its release to
  // this look: whoever takes the lock now releases it.
  while (HasQueuedReleases()) {
    if (!catalog_mu_.TryLock()) return;  // its holder will
    ReleaseQueuedRecords();
    catalog_mu_.Unlock();
  }
}

bool NvmeTier::HasQueuedReleases() const {
  MutexLock lock(queue_mu_);
  return !queued_releases_.empty();
}

void NvmeTier::ReleaseQueuedRecords() {
  std::vector<Undeleted> queued;
  {
    MutexLock lock(queue_mu_);
    queued.swap(queued_releases_);
  }
  for (const Undeleted& q : queued) ReleaseRecord(q.id, q.extent);
}

std::optional<NvmeTier::Entry> NvmeTier::TakeBlock(uint64_t offset) {
  auto node = blocks_.extract(offset);
  if (node.empty()) return std::nullopt;
  if (node.mapped().awaiting_adoption) awaiting_adoption_.erase(node.mapped().id);
  return std::move(node.mapped());
}

void NvmeTier::ReleaseRecordOf(const std::optional<Entry>& block, const Extent& extent) {
  if (!block || !block->durable) return;
  CatalogHold hold(*this);
  ReleaseRecord(block->id, extent);
}

void NvmeTier::ReleaseRecord(const BlockIdentity& id, const Extent& extent) {
  auto owner = owner_.find(id);
  if (owner == owner_.end() || owner->second != extent.offset) {
    ForgetCopy(id, extent.offset);
    return;
  }
  owner_.erase(owner);
  // Putting the record for another copy may wait out a stall: that copy may be one a caller was
  // told would survive a restart (MustSurviveRestart). Rare: two copies of one block on NVMe.
  if (PassRecordOn(id)) return;
  // On a network thread, often (a DEL, a DROP): never waiting out a stall.
  RetryUndeletedRecords(Catalog::Stall::kRefuse);
  const Status deleted = catalog_->Delete(id.ns, id.key, Catalog::Stall::kRefuse);
  if (deleted.ok()) return;
  const bool deferred = deleted.code() == StatusCode::kBusy;
  if (deferred) {
    ++catalog_deletes_deferred_;
    // So that the sync schedule does it even while nothing is written or freed.
    unsynced_acknowledged_.fetch_add(1, std::memory_order_acq_rel);
  } else {
    ++catalog_errors_;
    spdlog::warn("nvme: catalog delete failed; the record stays until a retry succeeds");
  }
  undeleted_.push_back({id, {extent.offset, extent.length}, deferred});
}

bool NvmeTier::PassRecordOn(const BlockIdentity& id) {
  for (auto it = other_copies_.find(id); it != other_copies_.end(); it = other_copies_.find(id)) {
    const uint64_t offset = it->second;
    other_copies_.erase(it);
    Entry copy;
    {
      MutexLock lock(mu_);
      auto b = blocks_.find(offset);
      // Gone or rewritten since it lost the record: not a copy any more.
      if (b == blocks_.end() || !(b->second.id == id) || !b->second.durable) continue;
      // From now on its Free may have a record to pass on (a third copy), so it waits for the
      // catalog: a queued free would give the extent back while the put below goes on.
      b->second.older_copies = true;
      copy = b->second;
    }
    if (PutRecordLocked(offset, copy, /*access=*/false).ok()) {
      MutexLock lock(mu_);
      auto b = blocks_.find(offset);
      if (b != blocks_.end() && b->second.id == id)
        b->second.older_copies = other_copies_.contains(id);
      return true;
    }
    // No record names it now: MustSurviveRestart must not vouch for it. The next copy, if any,
    // is tried in turn, so that no copy whose put failed stays durable and the record, once
    // deleted below, leaves none durable behind it.
    MutexLock lock(mu_);
    auto b = blocks_.find(offset);
    if (b != blocks_.end() && b->second.id == id) {
      b->second.durable = false;
      b->second.older_copies = false;
    }
  }
  return false;
}

void NvmeTier::ForgetCopy(const BlockIdentity& id, uint64_t offset) {
  auto [begin, end] = other_copies_.equal_range(id);
  for (auto it = begin; it != end; ++it) {
    if (it->second == offset) {
      other_copies_.erase(it);
      break;
    }
  }
  if (other_copies_.contains(id)) return;
  // The last older copy is gone: the owner's free no longer has a record to pass on, and need
  // not wait for the catalog.
  auto owner = owner_.find(id);
  if (owner == owner_.end()) return;
  MutexLock lock(mu_);
  auto b = blocks_.find(owner->second);
  if (b != blocks_.end() && b->second.id == id) b->second.older_copies = false;
}

void NvmeTier::RetryUndeletedRecords(Catalog::Stall stall) {
  // Oldest first. A stall holds for every delete, so the first one it refuses ends the retry.
  // One that fails outright most often fails them all (a catalog that cannot write): past it,
  // the deletes that failed before are left for the next retry, so that a long outage does not
  // cost each free a call per undeleted record. Those a stall put off are still tried: a Sync is
  // about to take their counts, and nothing else would bring one for them.
  size_t kept = 0;
  bool stalled = false;
  bool failed = false;
  for (Undeleted& u : undeleted_) {
    if (!stalled && (u.deferred || !failed)) {
      const Status deleted = catalog_->Delete(u.id.ns, u.id.key, stall);
      if (deleted.ok()) continue;
      if (deleted.code() == StatusCode::kBusy) {
        stalled = true;
      } else {
        failed = true;
        // A delete put off before and failing now is counted once, as a failure.
        if (u.deferred) ++catalog_errors_;
        u.deferred = false;
      }
    }
    undeleted_[kept++] = u;
  }
  undeleted_.erase(undeleted_.begin() + static_cast<std::ptrdiff_t>(kept), undeleted_.end());
}

bool NvmeTier::OverlapsUndeleted(uint64_t offset, const Entry& entry) const {
  const uint64_t end = offset + ExtentFootprint(entry.payload_bytes);
  return std::any_of(undeleted_.begin(), undeleted_.end(), [&](const Undeleted& u) {
    // A record of the same block is replaced by the put, not left beside it.
    return !(u.id == entry.id) && u.extent.offset < end &&
           offset < u.extent.offset + ExtentFootprint(u.extent.length);
  });
}

Status NvmeTier::Sync() {
  MutexLock lock(sync_mu_);
  // Taken before the syncs: what completes meanwhile may have missed them. And before the retry
  // below: a delete put off again meanwhile (a free's, while the stall goes on) must keep the
  // count that brings the next Sync.
  const UnsyncedWrites before = unsynced_writes();
  {
    // The periodic retry of deletes that failed or were put off, for a tier that is not writing
    // meanwhile.
    CatalogHold catalog_hold(*this);
    RetryUndeletedRecords(Catalog::Stall::kWait);
  }
  const auto started = std::chrono::steady_clock::now();
  for (const auto& f : files_) KVTIER_RETURN_IF_ERROR(io_->Sync(f->fd()));
  KVTIER_RETURN_IF_ERROR(catalog_->Sync());
  unsynced_blocks_.fetch_sub(before.blocks, std::memory_order_acq_rel);
  unsynced_acknowledged_.fetch_sub(before.acknowledged, std::memory_order_acq_rel);
  const auto took = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::chrono::steady_clock::now() - started)
                                              .count());
  ++syncs_;
  sync_us_ += took;
  uint64_t longest = longest_sync_us_.load(std::memory_order_relaxed);
  while (took > longest && !longest_sync_us_.compare_exchange_weak(longest, took)) {
  }
  return Status::Ok();
}

TierStats NvmeTier::Stats() const {
  MutexLock lock(mu_);
  return allocator_.Stats();
}

Extent NvmeTier::ReclaimUnit(const Extent& victim, uint64_t room_bytes) const {
  MutexLock lock(mu_);
  return allocator_.RoomAround(victim.offset, room_bytes).value_or(victim);
}

std::optional<std::vector<BlockIdentity>> NvmeTier::BlocksStartingIn(const Extent& range) const {
  std::vector<BlockIdentity> found;
  const auto inside = [&](uint64_t offset) {
    return offset >= range.offset && offset - range.offset < range.length;
  };
  MutexLock lock(mu_);
  if (range.length / kBlockAlignment > blocks_.size()) {
    for (const auto& [offset, entry] : blocks_) {
      if (inside(offset)) found.push_back(entry.id);
    }
    return found;
  }
  const uint64_t first = (range.offset + kBlockAlignment - 1) / kBlockAlignment * kBlockAlignment;
  for (uint64_t offset = first; inside(offset); offset += kBlockAlignment) {
    if (auto it = blocks_.find(offset); it != blocks_.end()) found.push_back(it->second.id);
  }
  return found;
}

NvmeStats NvmeTier::nvme_stats() const {
  NvmeStats s;
  s.reads = reads_;
  s.writes = writes_;
  s.bytes_read = bytes_read_;
  s.bytes_admitted = bytes_admitted_;
  s.device_bytes_written = device_bytes_written_;
  s.queue_depth = io_->queue_depth();
  s.in_flight = io_->in_flight();
  s.io_errors = io_errors_;
  s.catalog_errors = catalog_errors_;
  s.catalog_deletes_deferred = catalog_deletes_deferred_;
  s.checksum_failures = checksum_failures_;
  s.recovered_blocks = recovered_blocks_;
  s.dropped_at_recovery = dropped_at_recovery_;
  s.fixed_buffer_requests = io_->fixed_buffer_requests();
  s.syncs = syncs_;
  s.sync_us = sync_us_;
  s.longest_sync_us = longest_sync_us_;
  s.io_uring = io_->kind() == IoBackendKind::kIoUring;
  s.direct_io =
      std::all_of(files_.begin(), files_.end(), [](const auto& f) { return f->direct_io(); });
  return s;
}

void VisitNvmeStats(const NvmeStats& s,
                    const std::function<void(std::string_view name, double value)>& visit) {
  auto u = [&](std::string_view name, uint64_t v) { visit(name, static_cast<double>(v)); };
  u("reads", s.reads);
  u("writes", s.writes);
  u("bytes_read", s.bytes_read);
  u("bytes_admitted", s.bytes_admitted);
  u("device_bytes_written", s.device_bytes_written);
  visit("write_amplification", s.write_amplification());
  u("queue_depth", s.queue_depth);
  u("in_flight", s.in_flight);
  u("io_errors", s.io_errors);
  u("catalog_errors", s.catalog_errors);
  u("catalog_deletes_deferred", s.catalog_deletes_deferred);
  u("checksum_failures", s.checksum_failures);
  u("recovered_blocks", s.recovered_blocks);
  u("dropped_at_recovery", s.dropped_at_recovery);
  u("fixed_buffer_requests", s.fixed_buffer_requests);
  u("syncs", s.syncs);
  visit("sync_seconds", static_cast<double>(s.sync_us) / 1e6);
  visit("longest_sync_seconds", static_cast<double>(s.longest_sync_us) / 1e6);
  u("io_uring", s.io_uring ? 1 : 0);
  u("direct_io", s.direct_io ? 1 : 0);
}

}  // namespace kvtier::tiers::nvme
