// Catalog: the NVMe tier's durable index in RocksDB: block key -> CatalogRecord.
//
// One RocksDB database (a directory under the NVMe data directory) holds one entry per block that
// the tier has written with an identity, keyed by namespace id + block key, plus one meta entry
// that ties the records to one formatting of the data file (its file_id). The tier keeps the
// ordering rules (data before its record; record deleted before its extent is reused); this class
// only stores, loads and translates rocksdb::Status into kvtier's vocabulary, once, here.
//
// Durability: Put and Delete go to RocksDB's write-ahead log without fsync unless `sync_writes`;
// Sync() makes everything written so far durable. A crash (process) loses nothing written; a power
// cut may lose the unsynced tail of the log, and RocksDB's point-in-time recovery then keeps a
// prefix of the writes, never a later write without an earlier one.
//
// Thread safety: every method may be called from any thread (RocksDB synchronises itself).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/keys.h"
#include "common/status.h"
#include "tiers/nvme/nvme_format.h"

namespace rocksdb {
class DB;
class Env;
}  // namespace rocksdb

namespace kvtier::tiers::nvme {

class Catalog {
 public:
  struct Options {
    std::string path;             // the RocksDB directory; created when missing
    rocksdb::Env* env = nullptr;  // nullptr: the default Env; tests pass a power-cut emulator
    bool sync_writes = false;     // fsync the log on every Put/Delete
  };

  // What Load found: the records that decode, and how many entries did not (already deleted).
  struct Loaded {
    std::vector<CatalogRecord> records;
    uint64_t undecodable = 0;
  };

  // Opens (or creates) the database. Errors: kCorruption when RocksDB finds its files damaged
  // beyond point-in-time recovery (the caller may wipe with Destroy and retry), kDeviceError for
  // I/O failures, each naming the path.
  static Result<std::unique_ptr<Catalog>> Open(const Options& options);
  // Removes the database at `path` (cold start). OK when there is none.
  static Status Destroy(const std::string& path);

  ~Catalog();
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  // Whether a write may wait while RocksDB stalls writes (its memtables full, or too many files
  // awaiting compaction: it throttles or stops writers until a flush catches up).
  enum class Stall : uint8_t { kWait, kRefuse };

  Status Put(const CatalogRecord& record);
  // kRefuse: kBusy at once where RocksDB would make the write wait (`no_slowdown`), nothing
  // changed. Ignored with sync_writes, whose every write waits for the disk anyway.
  Status Delete(const NamespaceId& ns, const BlockKey& key, Stall stall = Stall::kWait);
  // Deletes every block record (not the meta entry), synced.
  Status DeleteAllRecords();
  // Reads every block record; an entry that does not decode (bad size, version, checksum, or a
  // value under the wrong key) is deleted and counted in `undecodable`.
  Result<Loaded> Load();

  // The file_id in the meta entry; nullopt when there is none (a new catalog) or when it is damaged
  // (logged; the caller discards the records). kCorruption when it is of another format version
  // (both versions named): the caller refuses to start.
  Result<std::optional<uint64_t>> ReadMeta();
  // Writes the meta entry, synced.
  Status WriteMeta(uint64_t file_id);

  // Makes every Put and Delete so far durable (fsync of the log).
  Status Sync();
  // Flushes the memtable into a table file (tests: makes records durable independently of data).
  Status FlushForTesting();
  // Tests: the next `count` Put and Delete calls fail with kDeviceError and change nothing, as
  // they do while the catalog's disk is full, and the ones after succeed again. (A power cut's
  // DropUnsyncedFs fails every write for good; this is the transient failure.)
  void FailWritesForTesting(uint64_t count) { failing_writes_.store(count); }
  // Tests: the next `count` Delete calls with Stall::kRefuse answer kBusy, as they do while
  // RocksDB stalls writes, and change nothing.
  void StallWritesForTesting(uint64_t count) { stalled_writes_.store(count); }

 private:
  Catalog(std::unique_ptr<rocksdb::DB> db, std::string path, bool sync_writes);
  // True when a failure injected by FailWritesForTesting is due (and uses it up).
  bool InjectedFailure();
  static bool UseOne(std::atomic<uint64_t>& left);

  const std::unique_ptr<rocksdb::DB> db_;
  const std::string path_;
  const bool sync_writes_;
  std::atomic<uint64_t> failing_writes_{0};
  std::atomic<uint64_t> stalled_writes_{0};
};

}  // namespace kvtier::tiers::nvme
