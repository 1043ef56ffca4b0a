#include "tiers/nvme/catalog.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <cstring>

namespace kvtier::tiers::nvme {
namespace {

// The one place a rocksdb::Status becomes a kvtier Status.
Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  std::string msg = what + ": " + s.ToString();
  if (s.IsCorruption()) return Corruption(std::move(msg));
  if (s.IsNotFound()) return NotFound(std::move(msg));
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut()) return Busy(std::move(msg));
  if (s.IsInvalidArgument() || s.IsNotSupported()) return InvalidArgument(std::move(msg));
  return DeviceError(std::move(msg));  // IOError, NoSpace and the rest: the disk under the catalog
}

rocksdb::Options DbOptions(rocksdb::Env* env) {
  rocksdb::Options o;
  o.create_if_missing = true;
  if (env != nullptr) o.env = env;
  // Keep a prefix of the log after a power cut rather than refuse to open.
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // The catalog is small (80-byte values, one per block): little memory, few files.
  o.write_buffer_size = 8 << 20;
  o.max_write_buffer_number = 2;
  o.max_open_files = 256;
  o.keep_log_file_num = 2;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  return o;
}

constexpr char kRecordPrefix = 'b';

}  // namespace

Result<std::unique_ptr<Catalog>> Catalog::Open(const Options& options) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(DbOptions(options.env), options.path, &raw);
  KVTIER_RETURN_IF_ERROR(FromRocks(s, "open catalog " + options.path));
  return std::unique_ptr<Catalog>(
      new Catalog(std::unique_ptr<rocksdb::DB>(raw), options.path, options.sync_writes));
}

Status Catalog::Destroy(const std::string& path) {
  return FromRocks(rocksdb::DestroyDB(path, rocksdb::Options()), "destroy catalog " + path);
}

Catalog::Catalog(std::unique_ptr<rocksdb::DB> db, std::string path, bool sync_writes)
    : db_(std::move(db)), path_(std::move(path)), sync_writes_(sync_writes) {}

Catalog::~Catalog() {
  rocksdb::Status s = db_->Close();
  if (!s.ok()) spdlog::warn("nvme: closing catalog {}: {}", path_, s.ToString());
}

bool Catalog::UseOne(std::atomic<uint64_t>& left) {
  uint64_t n = left.load();
  while (n > 0 && !left.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0;
}

bool Catalog::InjectedFailure() { return UseOne(failing_writes_); }

Status Catalog::Put(const CatalogRecord& record) {
  if (InjectedFailure()) return DeviceError("catalog put: injected failure");
  rocksdb::WriteOptions wo;
  wo.sync = sync_writes_;
  return FromRocks(
      db_->Put(wo, EncodeCatalogKey(record.ns, record.key), EncodeCatalogValue(record)),
      "catalog put");
}

Status Catalog::Delete(const NamespaceId& ns, const BlockKey& key, Stall stall) {
  const bool refuse = stall == Stall::kRefuse && !sync_writes_;
  if (refuse && UseOne(stalled_writes_)) return Busy("catalog delete: writes stalled (injected)");
  if (InjectedFailure()) return DeviceError("catalog delete: injected failure");
  rocksdb::WriteOptions wo;
  wo.sync = sync_writes_;
  wo.no_slowdown = refuse;
  const rocksdb::Status s = db_->Delete(wo, EncodeCatalogKey(ns, key));
  // What no_slowdown answers instead of waiting.
  if (refuse && s.IsIncomplete()) return Busy("catalog delete: writes stalled: " + s.ToString());
  return FromRocks(s, "catalog delete");
}

Status Catalog::DeleteAllRecords() {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  std::string begin(1, kRecordPrefix), end(1, kRecordPrefix + 1);
  return FromRocks(db_->DeleteRange(wo, db_->DefaultColumnFamily(), begin, end),
                   "catalog delete all");
}

Result<Catalog::Loaded> Catalog::Load() {
  Loaded loaded;
  std::vector<std::string> bad;
  // One sequential pass at start-up: large reads, and nothing kept in the block cache after it.
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.readahead_size = 4 << 20;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->Seek(std::string(1, kRecordPrefix)); it->Valid(); it->Next()) {
    std::string_view key(it->key().data(), it->key().size());
    if (key.empty() || key[0] != kRecordPrefix) break;
    Result<CatalogRecord> rec =
        DecodeCatalogValue(key, std::string_view(it->value().data(), it->value().size()));
    if (rec.ok()) {
      loaded.records.push_back(*rec);
    } else {
      bad.emplace_back(key);
    }
  }
  KVTIER_RETURN_IF_ERROR(FromRocks(it->status(), "catalog scan"));
  for (const std::string& key : bad) {
    KVTIER_RETURN_IF_ERROR(FromRocks(db_->Delete(rocksdb::WriteOptions(), key), "catalog delete"));
  }
  loaded.undecodable = bad.size();
  return loaded;
}

Result<std::optional<uint64_t>> Catalog::ReadMeta() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), std::string(kCatalogMetaKey), &value);
  if (s.IsNotFound()) return std::optional<uint64_t>();
  KVTIER_RETURN_IF_ERROR(FromRocks(s, "catalog read meta"));
  Result<uint64_t> id = DecodeCatalogMeta(value);
  if (id.ok()) return std::optional<uint64_t>(*id);
  uint32_t version = 0;
  if (value.size() >= 4) std::memcpy(&version, value.data(), 4);
  if (version != kFormatVersion) return Corruption(path_ + ": " + id.status().message());
  // Damaged, but of our version: the records cannot be tied to the data file; start cold.
  spdlog::warn("nvme: {}: {}; its records will be discarded", path_, id.status().message());
  return std::optional<uint64_t>();
}

Status Catalog::WriteMeta(uint64_t file_id) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Put(wo, std::string(kCatalogMetaKey), EncodeCatalogMeta(file_id)),
                   "catalog write meta");
}

Status Catalog::Sync() { return FromRocks(db_->SyncWAL(), "catalog sync"); }

Status Catalog::FlushForTesting() {
  return FromRocks(db_->Flush(rocksdb::FlushOptions()), "catalog flush");
}

}  // namespace kvtier::tiers::nvme
