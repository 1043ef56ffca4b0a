// Power-cut emulation for the NVMe tier: lose what was written but not synced, in both the data
// file and the RocksDB catalog, then reopen and check that nothing wrong is served.
//
// PowerCutJournal + PowerCutBackend (data files): the backend wraps a real IoBackend. Before each
// write it saves the bytes the write will overwrite; IoBackend::Sync(fd) forgets the saved bytes of
// that fd (they are durable now). Cut() is the moment power fails: from then on writes and syncs
// are silently dropped (the machine is gone). Revert() then puts the saved bytes back, as a device
// that lost its volatile cache would: all of them, or (kRandom) for each unsynced write at random
// either nothing (the write reached the media), everything, or a random run of 4 KiB sectors (a
// torn write).
//
// DropUnsyncedFs (catalog): a rocksdb::FileSystem wrapper that tracks, per file written through it,
// how many bytes have been synced. After Cut() every mutating call fails with an I/O error (the DB
// can only close); Revert() truncates each file to its synced length, as leveldb's
// FaultInjectionTestEnv does. Pass it to RocksDB with rocksdb::NewCompositeEnv.
//
// Order in a test: Cut() both, destroy the tier, Revert() both, reopen. Thread safety: every method
// may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <rocksdb/file_system.h>

#include "tiers/nvme/io_backend.h"

namespace kvtier::tiers::nvme::testing {

enum class RevertMode : uint8_t { kAll, kRandom };

class PowerCutJournal {
 public:
  void Record(int fd, uint64_t offset, uint64_t length);
  void Synced(int fd);
  void Cut();
  bool cut() const;
  // Undoes the unsynced writes (see the header comment). Returns how many were undone in part or
  // whole. Call after the files' writers are gone.
  uint64_t Revert(RevertMode mode, uint64_t seed);
  uint64_t unsynced_writes() const;

 private:
  struct Undo {
    int fd;
    std::string path;
    uint64_t offset;
    std::vector<std::byte> old_bytes;
  };
  mutable std::mutex mu_;
  std::vector<Undo> undo_;
  bool cut_ = false;
};

class PowerCutBackend final : public IoBackend {
 public:
  PowerCutBackend(std::unique_ptr<IoBackend> inner, std::shared_ptr<PowerCutJournal> journal)
      : inner_(std::move(inner)), journal_(std::move(journal)) {}

  void Submit(std::span<IoRequest> requests) override;
  Status Sync(int fd) override;
  Status RegisterRegion(std::byte* base, uint64_t bytes) override {
    return inner_->RegisterRegion(base, bytes);
  }
  IoBackendKind kind() const override { return inner_->kind(); }
  uint32_t queue_depth() const override { return inner_->queue_depth(); }
  uint64_t in_flight() const override { return inner_->in_flight(); }
  uint64_t fixed_buffer_requests() const override { return inner_->fixed_buffer_requests(); }

 private:
  std::unique_ptr<IoBackend> inner_;
  std::shared_ptr<PowerCutJournal> journal_;
};

class DropUnsyncedFs final : public rocksdb::FileSystemWrapper {
 public:
  explicit DropUnsyncedFs(const std::shared_ptr<rocksdb::FileSystem>& base)
      : FileSystemWrapper(base) {}

  const char* Name() const override { return "DropUnsyncedFs"; }
  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& target,
                               const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& fname, const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;

  void Cut();
  // Truncates every tracked file to its synced length; returns the bytes dropped.
  uint64_t Revert();

  // Called by the tracked files.
  bool IsCut() const;
  void Appended(const std::string& fname, uint64_t bytes);
  void SyncedFile(const std::string& fname);

 private:
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, FileState> files_;
  bool cut_ = false;
};

}  // namespace kvtier::tiers::nvme::testing
