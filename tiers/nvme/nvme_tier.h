// NvmeTier: the cold tier. Blocks in extents of a preallocated O_DIRECT data file, named and
// indexed in a RocksDB catalog, so the cold cache survives a restart.
//
// Lifecycle. NvmeTier::Open(options) prepares <data_dir>/kvtier-nvme.data (or Options::data_paths:
// files or raw block devices, one per drive) and <data_dir>/catalog, scans the catalog and keeps
// every record whose extent is sane. It reads nothing from the data file, so a restart costs one
// catalog scan: a block's record header and payload are checked on its first read, as on every
// read. The owner (the store) then calls TakeRecovered() once and adds those blocks to
// its index as NVMe-resident. Their extents are allocated, exactly as if the store had allocated
// and written them: it frees each one when it evicts or drops the block (a store that wants none
// of them frees them all). A forced cold start (Options::cold_start, or a file named COLD_START in
// the data directory, removed once honoured) wipes data and catalog first.
//
// Writing. WriteBlock(extent, id, src) computes the payload's XXH3-64, writes the record header
// (identity, size, checksum) and the payload into the extent in one batch, and only when both are
// on the device puts the catalog record. Free(extent) deletes the record, or, when an older copy of
// the block is still live (the freed one had taken the record over from it), puts the record for
// that copy instead. A delete the catalog refuses is retried (by later puts, frees and Sync), and
// until it succeeds no record is put over that extent.
//
// Free never waits on the catalog (it runs on the daemon's network threads, for DEL, DROP, SET over
// a value): unless sync_writes, its delete asks RocksDB not to stall (`no_slowdown`: a memtable
// insert and a buffered log append), and one refused because RocksDB is stalling writes is put off
// to the next put or Sync (catalog_deletes_deferred; it counts among the acknowledged unsynced
// writes, so the sync schedule does it). When another thread holds the catalog (a put that may be
// stalled), the freeing thread queues the record's release and goes on; the holder does it before
// letting the catalog go, and every later put does what is queued before its own record, so a
// freed extent that is reused never has two records. The extent is free at once: a record left
// over it fails its header check (another block's identity) and is dropped, never served. The
// exception: a copy that took the record over from an older copy still live (Entry::older_copies,
// rare) waits for the catalog, since its record must pass back to that copy before the extent can
// be reused.
// ReadBlock(extent, id, dst) reads header and payload and returns kChecksumMismatch (one log line,
// a counter) unless the header names `id` and the payload matches its checksum: wrong bytes are
// never returned as a block. Plain Write/Read work too, but their blocks have no identity and no
// catalog record: they are checksummed, not durable.
//
// Durability contract. No fsync per block by default. A process crash (kill -9) loses no block
// whose WriteBlock returned (O_DIRECT data is with the device, catalog writes are in the OS). A
// freed block whose record delete was queued or put off (above) may come back after a crash in
// that window (milliseconds; a RocksDB stall's length at worst): a removed value, never wrong
// bytes. With sync_writes a Free deletes its record, synced, before it returns. A
// power cut may lose any block written since the last Sync(), which the store may call periodically
// to bound the loss; a record that survives while its data did not fails its first read (header or
// payload checksum) and is dropped then, so a crash never serves wrong bytes. With sync_writes =
// true every WriteBlock fdatasyncs the data file and syncs the catalog before it returns (slow: for
// paranoid deployments; a cache rarely needs it).
//
// Buffers. src/dst may be anywhere; buffers aligned to 4 KiB (host-arena slots) go straight to the
// device, and when they lie in Options::registered_region (the host arena) io_uring uses its fixed
// buffers. Other buffers, and the unaligned tail of a block, go through a per-thread bounce buffer.
//
// Thread safety: every method may be called from any thread. Bookkeeping sits under one mutex,
// catalog updates under another (so a record's put and delete happen in the order the tier
// decided); no lock is held during data I/O. As tiers/tier.h says, one extent has one writer and no
// readers while it is being written.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/keys.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/types.h"
#include "tiers/nvme/catalog.h"
#include "tiers/nvme/data_file.h"
#include "tiers/nvme/extent_allocator.h"
#include "tiers/nvme/io_backend.h"
#include "tiers/nvme/nvme_format.h"
#include "tiers/tier.h"

namespace kvtier::tiers::nvme {

struct BlockIdentityHash {
  size_t operator()(const BlockIdentity& id) const noexcept {
    return Key128Hash{}(id.key) ^ (Key128Hash{}(id.ns) * 31);
  }
};

// A block found on disk at open, handed to the store by TakeRecovered().
struct RecoveredBlock {
  NamespaceId ns;
  BlockKey key;
  Extent extent;  // extent.length is the payload size
  uint64_t payload_checksum = 0;
  uint64_t last_access_unix_us = 0;
};

// Counters for /metrics and `kvtier stats`. Monotonic except the gauges marked so.
struct NvmeStats {
  uint64_t reads = 0;                 // ReadBlock/Read calls that returned a block
  uint64_t writes = 0;                // WriteBlock/Write calls that stored a block
  uint64_t bytes_read = 0;            // payload bytes returned
  uint64_t bytes_admitted = 0;        // payload bytes stored
  uint64_t device_bytes_written = 0;  // bytes written to the data file (headers, padding included)
  uint64_t queue_depth = 0;           // configured depth
  uint64_t in_flight = 0;             // gauge: requests in the kernel now
  uint64_t io_errors = 0;             // reads and writes that failed with a device error
  uint64_t catalog_errors = 0;        // catalog puts/deletes that failed (durability lost)
  // Frees' record deletes put off while RocksDB stalled writes (done by a later put or Sync).
  uint64_t catalog_deletes_deferred = 0;
  uint64_t checksum_failures = 0;      // ReadBlock/Read answered kChecksumMismatch
  uint64_t recovered_blocks = 0;       // blocks kept at open
  uint64_t dropped_at_recovery = 0;    // catalog records dropped at open
  uint64_t fixed_buffer_requests = 0;  // requests that used registered (arena) buffers
  // Sync calls that succeeded, their time in all and the longest: each is a disk flush, which on
  // a disk with a volatile write cache stalls its reads and writes while it runs.
  uint64_t syncs = 0;
  uint64_t sync_us = 0;
  uint64_t longest_sync_us = 0;
  bool io_uring = false;   // false: the pread/pwrite thread backend
  bool direct_io = false;  // false: the file system refused O_DIRECT
  // device_bytes_written / bytes_admitted; 0 before the first write.
  double write_amplification() const {
    return bytes_admitted == 0 ? 0.0 : static_cast<double>(device_bytes_written) / bytes_admitted;
  }
};

// Calls visit(name, value) once per NvmeStats field, in a fixed order, with stable snake_case names
// ("reads", "device_bytes_written", "write_amplification", ...): the one list that /metrics, INFO
// and `kvtier stats` render, so the three views cannot drift apart.
void VisitNvmeStats(const NvmeStats& stats,
                    const std::function<void(std::string_view name, double value)>& visit);

class NvmeTier final : public Tier {
 public:
  static constexpr std::string_view kDataFileName = "kvtier-nvme.data";
  static constexpr std::string_view kCatalogDirName = "catalog";
  static constexpr std::string_view kColdStartMarker = "COLD_START";

  struct Options {
    std::string data_dir;  // created when missing
    // Where the blocks go instead of <data_dir>/kvtier-nvme.data: files or raw block devices (used
    // from offset 0; formatted only by a forced cold start, see DataFile::Open), typically one per
    // drive. capacity_bytes is split equally between them; consecutive blocks go to different ones.
    // The catalog always lives in data_dir. Changing the list starts the tier cold.
    std::vector<std::string> data_paths;
    uint64_t capacity_bytes = 0;  // bytes of the data region (blocks, headers, padding)
    // capacity_bytes is a default (nvme.bytes: auto): data files already formatted alike keep
    // their capacity and blocks (DataFile::Options::keep_formatted_capacity).
    bool keep_formatted_capacity = false;
    IoBackendConfig io;
    // The host arena (or any long-lived buffer), registered with io_uring for zero-copy transfers.
    // Must outlive the tier. Registration failure (RLIMIT_MEMLOCK) is a warning, not an error.
    std::byte* registered_region = nullptr;
    uint64_t registered_region_bytes = 0;
    bool cold_start = false;   // wipe data file and catalog before opening
    bool direct_io = true;     // false: buffered I/O (tests of the fallback)
    bool sync_writes = false;  // fsync data and catalog on every WriteBlock (see the contract)
    // Put the record again with a new last-access time on every successful ReadBlock, so a restart
    // sees recency. Costs one small unsynced RocksDB write per read.
    bool record_access_on_read = true;
    rocksdb::Env* catalog_env = nullptr;  // tests: a power-cut emulator; nullptr: default
    // Tests only (empty otherwise): called on the writing thread once a WriteBlock has put its
    // catalog record, before the write returns and with no lock held, so that a test can run
    // other calls at exactly that point. Not on the writing thread: a batch's state is per thread.
    std::function<void(const Extent&)> record_put_hook;
  };

  // Opens or creates the tier. `backend` replaces the one Options::io would build (tests wrap the
  // real backend to emulate power cuts). Errors (the daemon refuses to start and prints them):
  // kInvalidArgument for bad options, naming the key; kCorruption when the data file or catalog is
  // of another format version or not a kvtier file (both versions and the path named: remove the
  // directory or force a cold start); I/O errors of the data file, backend or catalog.
  static Result<std::unique_ptr<NvmeTier>> Open(const Options& options,
                                                std::unique_ptr<IoBackend> backend = nullptr);

  ~NvmeTier() override;

  TierId id() const override { return TierId::kNvme; }
  // See Tier::Allocate. kRejected when the block plus its 4 KiB header can never fit.
  Result<Extent> Allocate(uint64_t bytes) override;
  // Deletes the block's catalog record (if it is still the key's current one; without waiting on
  // the catalog, see the header), and frees the extent. An extent not allocated, or of another
  // length, is counted in invalid_free_count() and changes nothing.
  void Free(const Extent& extent) override;
  // Stores src (0 < size <= extent.length) as block `id`. kInvalidArgument for a bad size or an
  // extent not allocated; kDeviceError when the device failed (nothing is recorded: free the
  // extent). A catalog failure is not an error (the block is served, but lost at restart). A block
  // the extent still holds is replaced: it and its record go first, as at a Free.
  Status WriteBlock(const Extent& extent, const BlockIdentity& id,
                    std::span<const std::byte> src) override;
  // Reads block `id` into dst: the whole block, or its first dst.size() bytes (the whole block is
  // still read and verified, through a per-thread buffer). kNotFound when nothing was written at
  // extent; kInvalidArgument when dst is larger than the block; kDeviceError on I/O failure;
  // kChecksumMismatch when the header or payload does not check out (drop the block).
  Status ReadBlock(const Extent& extent, const BlockIdentity& id,
                   std::span<std::byte> dst) override;
  // WriteBlock/ReadBlock for many blocks in one submission (Tier::WriteBlocks): the device gets
  // every block's requests at once, up to the backend's queue depth. Each block's status is what
  // WriteBlock/ReadBlock would answer for it alone.
  void WriteBlocks(std::span<BlockWrite> writes) override;
  void ReadBlocks(std::span<BlockRead> reads) override;
  // WriteBlock/ReadBlock without an identity: checksummed, not recorded in the catalog.
  Status Write(const Extent& extent, std::span<const std::byte> src) override;
  Status Read(const Extent& extent, std::span<std::byte> dst) override;
  // Puts the block's catalog record again with the current time as its last access, so that a
  // restart orders it as just used. Not for a block without a record (Write, or a failed put).
  void RecordUse(const Extent& extent) override;
  // Counts the block among the acknowledged writes (unsynced_writes), so that it is synced on
  // their schedule.
  Status MustSurviveRestart(const Extent& extent) override;
  TierStats Stats() const override;
  // The record header and the payload rounded to 4 KiB (ExtentFootprint).
  uint64_t FootprintOf(uint64_t bytes) const override { return ExtentFootprint(bytes); }
  // The footprint of a `room_bytes` block from `victim` (or the free hole before it) on: once the
  // blocks starting there are freed, it is one hole the block fits (tiers/room_window.h). `victim`
  // itself when that would run past the victim's data file.
  Extent ReclaimUnit(const Extent& victim, uint64_t room_bytes) const override;
  // From blocks_: every block starts on a kBlockAlignment boundary, so a range is probed offset by
  // offset (or blocks_ walked, when it holds fewer blocks than the range has offsets).
  std::optional<std::vector<BlockIdentity>> BlocksStartingIn(const Extent& range) const override;
  // The NvmeStats fields, through VisitNvmeStats.
  void VisitDeviceStats(const std::function<void(std::string_view, double)>& visit) const override {
    VisitNvmeStats(nvme_stats(), visit);
  }

  // The blocks found at open, oldest access first; empty on later calls. Call once after Open.
  // Each awaits adoption until the caller settles it (SettleRecovered) or the tier drops it
  // (DropRecoveredCopies).
  std::vector<RecoveredBlock> TakeRecovered();
  // Whether the block found at open at `extent` still awaits adoption; it no longer does after
  // this call, and the caller adopts it or frees it. false: dropped since (its key changed), and
  // its extent may be another block's by now: the caller leaves it alone.
  bool SettleRecovered(const Extent& extent);
  // Frees the blocks of `key` in `ns` (of every key of `ns` when none is given) found at open
  // that still await adoption: the key was removed or written again since the start (the
  // namespace dropped), and such a block, left with its record, would come back at the next
  // restart if this run ended before adopting it. For a namespace, a walk of every block.
  void DropRecoveredCopies(const NamespaceId& ns, const std::optional<BlockKey>& key) override;
  // Makes every block written so far durable: fdatasync of the data file, then of the catalog log.
  Status Sync();
  // Blocks written (WriteBlock, WriteBlocks) since the last successful Sync, and of them those
  // the caller acknowledges as surviving a restart (BlockWrite::must_survive_restart), which
  // also counts the record deletes put off by a RocksDB stall (done by the Sync). A write that
  // completes while a Sync runs counts for the next one.
  struct UnsyncedWrites {
    uint64_t blocks = 0;
    uint64_t acknowledged = 0;
  };
  UnsyncedWrites unsynced_writes() const {
    return {unsynced_blocks_.load(std::memory_order_acquire),
            unsynced_acknowledged_.load(std::memory_order_acquire)};
  }
  NvmeStats nvme_stats() const;
  uint64_t invalid_free_count() const { return invalid_frees_.load(std::memory_order_relaxed); }

  Catalog& catalog_for_testing() { return *catalog_; }
  const DataFile& data_file(size_t i = 0) const { return *files_[i]; }
  size_t data_file_count() const { return files_.size(); }

 private:
  struct Entry {
    BlockIdentity id;
    uint64_t payload_bytes = 0;
    uint64_t checksum = 0;
    bool durable = false;  // has a catalog record
    // Found at open and not settled yet (SettleRecovered, DropRecoveredCopies): the store does
    // not know it.
    bool awaiting_adoption = false;
    // Took the record over from an older copy of the block that may still be live
    // (other_copies_): its Free may have to put the record back for that copy, and waits for the
    // catalog to do it before the extent can be reused (a kill -9 in between would leave the
    // older copy, which may have been acknowledged as durable, with no record).
    bool older_copies = false;
  };

  // The data file holding region offset `offset`, and the file offset of it.
  struct Place {
    const DataFile* file;
    uint64_t at;
  };

  NvmeTier(const Options& options, std::vector<std::unique_ptr<DataFile>> files,
           std::unique_ptr<IoBackend> backend, std::unique_ptr<Catalog> catalog);

  Place Locate(uint64_t offset) const;
  // The id the catalog's meta entry records: the data file's, or a combination of all of them.
  uint64_t CombinedFileId() const;

  Status Recover();
  void ClaimRecords(std::span<const CatalogRecord> records);
  // Forgets a record that failed its checks: frees its extent if it was claimed, deletes it.
  void Drop(const CatalogRecord& record, bool claimed);
  // The data path (nvme_tier_io.cc). A batch plans every block (PlanBlock*: validation, the
  // record header, staging slot i for block i), submits all their requests at once
  // (SubmitPlanned), then finishes each block alone (Finish*: errors, verification, catalog).
  struct PlannedIo;
  void WriteBatch(std::span<BlockWrite> writes, bool durable);
  Status PlanBlockWrite(const BlockWrite& w, bool durable, size_t slot, PlannedIo& p);
  Status FinishWrite(const Extent& extent, bool must_survive_restart, PlannedIo& p,
                     std::span<const IoRequest> requests);
  // check_identity false: Read, which checks the block against the tier's own record of it.
  void ReadBatch(std::span<BlockRead> reads, bool check_identity);
  PlannedIo PlanBlockRead(const BlockRead& r, const Entry& expected, size_t block, size_t slot);
  Result<Entry> ExpectedAt(const BlockRead& r, bool check_identity);
  Status FinishBlockRead(const BlockRead& r, const PlannedIo& p,
                         std::span<const IoRequest> requests, bool record_access);
  Status ReadPrefix(const BlockRead& r, const Entry& expected, bool record_access,
                    std::vector<IoRequest>& requests);
  void SubmitPlanned(std::span<PlannedIo> planned, std::vector<IoRequest>& requests);
  Status IoStatus(const PlannedIo& p, std::span<const IoRequest> requests);
  Status VerifyRead(const Extent& extent, const Entry& expected, std::span<const std::byte> header,
                    std::span<const std::byte> payload);
  // Records the block at `offset` in the catalog (access: a refresh of the record it owns, else
  // nothing). kDeviceError when the catalog refuses it, or when a record whose delete failed still
  // names part of the extent (two records over one extent: a restart might keep the stale one).
  Status PutRecord(uint64_t offset, const Entry& entry, bool access);
  Status PutRecordLocked(uint64_t offset, const Entry& entry, bool access) REQUIRES(catalog_mu_)
      EXCLUDES(mu_);
  // Whether the block at `offset` is still `entry` (same identity, size and checksum).
  bool StillHolds(uint64_t offset, const Entry& entry) const REQUIRES(catalog_mu_);
  // Takes the block at `offset` out of blocks_ (a Free, or a write over it); nullopt when none.
  std::optional<Entry> TakeBlock(uint64_t offset) REQUIRES(mu_);
  // ReleaseRecord for a block TakeBlock took out of `extent`, if it had a record.
  void ReleaseRecordOf(const std::optional<Entry>& block, const Extent& extent)
      EXCLUDES(catalog_mu_);
  // What becomes of block `id`'s record when its copy at `extent` is freed: nothing when another
  // copy holds it; else it passes to another live copy, or is deleted. A delete that fails leaves
  // the record in undeleted_.
  void ReleaseRecord(const BlockIdentity& id, const Extent& extent) REQUIRES(catalog_mu_)
      EXCLUDES(mu_);
  // Puts `id`'s record for one of its other live copies, trying each in turn; false when there
  // is none or every put failed (each copy whose put failed is then no longer durable).
  bool PassRecordOn(const BlockIdentity& id) REQUIRES(catalog_mu_) EXCLUDES(mu_);
  // Takes the copy at `offset` out of other_copies_; when it was the block's last one, clears
  // the owner's Entry::older_copies.
  void ForgetCopy(const BlockIdentity& id, uint64_t offset) REQUIRES(catalog_mu_) EXCLUDES(mu_);
  // Deletes the records of undeleted_, oldest first, until a stall refuses one. Past the first
  // that fails outright, only deletes a stall put off are tried; those that fail stay.
  void RetryUndeletedRecords(Catalog::Stall stall) REQUIRES(catalog_mu_);
  // catalog_mu_, held the way the queued releases need: ReleaseQueuedRecords right after taking
  // it and before letting it go, and a look at the queue after, for a release queued by a Free
  // that found it still held (which counts on that look).
  class SCOPED_CAPABILITY CatalogHold {
   public:
    explicit CatalogHold(NvmeTier& tier) ACQUIRE(tier.catalog_mu_);
    ~CatalogHold() RELEASE();
    CatalogHold(const CatalogHold&) = delete;
    CatalogHold& operator=(const CatalogHold&) = delete;

   private:
    NvmeTier& tier_;
  };
  // Ends a hold of catalog_mu_ (CatalogHold, or a Free's TryLock).
  void UnlockCatalog() RELEASE(catalog_mu_);
  // ReleaseRecord for every release queued by Free.
  void ReleaseQueuedRecords() REQUIRES(catalog_mu_) EXCLUDES(mu_);
  bool HasQueuedReleases() const EXCLUDES(queue_mu_);
  bool OverlapsUndeleted(uint64_t offset, const Entry& entry) const REQUIRES(catalog_mu_);
  Status ChecksumFailure(const Extent& extent, const std::string& why);

  // First, so that it is let go last: no other kvtierd takes the directory while this one still
  // writes to it.
  std::unique_ptr<DirectoryLock> dir_lock_;
  const Options options_;
  const std::vector<std::unique_ptr<DataFile>> files_;  // equal capacities: one segment each
  const uint64_t segment_bytes_;
  const std::unique_ptr<IoBackend> io_;
  const std::unique_ptr<Catalog> catalog_;

  mutable Mutex mu_;
  ExtentAllocator allocator_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Entry> blocks_ GUARDED_BY(mu_);  // by extent offset
  std::vector<RecoveredBlock> recovered_ GUARDED_BY(mu_);
  // The offset of each block found at open that still awaits adoption (Entry::awaiting_adoption;
  // one per identity, as the catalog holds one record per block): DropRecoveredCopies finds a
  // key's without the catalog's bookkeeping.
  std::unordered_map<BlockIdentity, uint64_t, BlockIdentityHash> awaiting_adoption_ GUARDED_BY(mu_);

  // Which extent holds each identity's catalog record, so a Free of an older copy does not delete
  // the record of a newer one. Put/Delete happen under this lock, in the order decided here.
  Mutex catalog_mu_ ACQUIRED_BEFORE(mu_);
  std::unordered_map<BlockIdentity, uint64_t, BlockIdentityHash> owner_ GUARDED_BY(catalog_mu_);
  // Live, recorded copies of a block whose record a newer copy has taken over. When the newer one
  // is freed first, the record passes back to one of these: deleting it would lose a block whose
  // WriteBlock returned and that was never freed.
  std::unordered_multimap<BlockIdentity, uint64_t, BlockIdentityHash> other_copies_
      GUARDED_BY(catalog_mu_);
  // Records whose delete failed (catalog_errors): each still names an extent that was given back
  // and may be reused. Nothing is recorded over such an extent until the delete succeeds (retried
  // by later puts, frees and Sync); the extent itself is reused, since a stale record alone never
  // serves wrong bytes (its header or payload check fails) and holding the space would drain the
  // tier while the catalog is down.
  struct Undeleted {
    BlockIdentity id;
    Extent extent;  // extent.length is the payload size, as in the record
    // Put off by a stall (its count in unsynced_acknowledged_ brings a Sync), not failed.
    bool deferred = false;
  };
  std::vector<Undeleted> undeleted_ GUARDED_BY(catalog_mu_);
  // Releases of freed blocks' records (ReleaseRecord) that their Free left to the holder of
  // catalog_mu_, oldest first. Taken last of all locks.
  mutable Mutex queue_mu_;
  std::vector<Undeleted> queued_releases_ GUARDED_BY(queue_mu_);
  uint64_t last_record_us_ GUARDED_BY(catalog_mu_) = 0;  // the last access time put in a record

  std::atomic<uint64_t> reads_{0}, writes_{0}, bytes_read_{0}, bytes_admitted_{0};
  std::atomic<uint64_t> device_bytes_written_{0}, io_errors_{0}, catalog_errors_{0};
  std::atomic<uint64_t> catalog_deletes_deferred_{0};
  std::atomic<uint64_t> checksum_failures_{0}, recovered_blocks_{0}, dropped_at_recovery_{0};
  std::atomic<uint64_t> invalid_frees_{0};
  std::atomic<uint64_t> unsynced_blocks_{0}, unsynced_acknowledged_{0};
  // One Sync at a time: each subtracts the writes it found waiting, which two at once would both
  // subtract, wrapping the counters.
  Mutex sync_mu_;
  std::atomic<uint64_t> syncs_{0}, sync_us_{0}, longest_sync_us_{0};
};

}  // namespace kvtier::tiers::nvme
