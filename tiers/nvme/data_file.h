// DataFile: one preallocated file that holds the NVMe tier's blocks, opened for direct I/O.
//
// Layout (a file, or a raw block device from offset 0): a 4 KiB superblock (tiers/nvme/nvme_format.h, docs/nvme-format.md) and then the data
// region, `capacity_bytes` long, where the extent allocator places blocks. The whole file is
// allocated up front (posix_fallocate) so that writes never extend it and never meet ENOSPC from a
// full file system later, and so that O_DIRECT writes need no metadata update.
//
// O_DIRECT: the file is opened with it so block bytes bypass the page cache (the host tier already
// caches hot blocks; double caching would halve useful RAM). A file system that refuses O_DIRECT
// (tmpfs before Linux 6.6, some overlays) gets a buffered fd and one warning; direct_io() says which.
//
// Ownership: the object owns the fd and closes it. Thread safety: the accessors are const and may be
// called from any thread; I/O on fd() goes through an IoBackend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "tiers/nvme/nvme_format.h"

namespace kvtier::tiers::nvme {

class DataFile {
 public:
  struct Options {
    std::string path;
    uint64_t capacity_bytes = 0;  // data region; rounded down to kBlockAlignment
    bool direct_io = true;        // false: always buffered (tests of the fallback)
    bool reformat = false;        // format whatever is there (a forced cold start)
    // capacity_bytes is a default, not a demand (nvme.bytes: auto, a share of the free space,
    // which moves as the disk fills): a file or device already formatted keeps the capacity it
    // was formatted with, and its blocks, instead of being reformatted to a new figure.
    bool keep_formatted_capacity = false;
  };

  // Opens `path`, creating and formatting it when absent. `path` may also be a raw block device:
  // it is then used from offset 0 without preallocation, and formatted only when `reformat` is set
  // (a device is never overwritten unasked; until then it answers kCorruption if it does not carry
  // a kvtier superblock, and kInvalidArgument if it carries one of another capacity or is too
  // small). An existing file of this format keeps its
  // superblock (file_id included) so the catalog's records stay valid; one formatted with another
  // capacity is reformatted with a fresh file_id (a warning: the cold cache is lost; not with
  // keep_formatted_capacity, which keeps the file's capacity instead), and so is a
  // file whose first 4 KiB were never written (a format cut short by a crash). Errors:
  // kInvalidArgument for a capacity below two alignment units; kCorruption naming the file when it
  // is not a kvtier data file, has another format version (both named) or a damaged superblock:
  // the caller refuses to start, or wipes when told to; kBusy when another DataFile (of this
  // process or another, under any name of the same file or device) has it open: the file is
  // locked (flock) while the DataFile lives; the translated errno of open, fallocate, pread or
  // pwrite.
  static Result<std::unique_ptr<DataFile>> Open(const Options& options);

  ~DataFile();
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  const Superblock& superblock() const { return superblock_; }
  uint64_t capacity_bytes() const { return superblock_.capacity_bytes; }
  // File offset of data-region offset 0.
  uint64_t data_offset() const { return superblock_.data_offset; }
  bool direct_io() const { return direct_io_; }
  // True when Open formatted the file (new, or reformatted): nothing in it can be recovered.
  bool formatted() const { return formatted_; }
  bool block_device() const { return block_device_; }

 private:
  DataFile(int fd, std::string path, bool direct_io);

  // Finishes Open for a raw block device.
  Status OpenDevice(uint64_t capacity, const Options& options);
  Status Format(uint64_t capacity_bytes);
  // kRejected, by name, when the file cannot grow to `bytes`: its file system has less free room
  // than that less what the file holds already (f_bavail: root's reserve is left alone).
  Status CheckRoomFor(uint64_t bytes) const;
  // Allocates the file up to `bytes` (posix_fallocate), checked first unless `checked`. On ext4 a
  // posix_fallocate that runs out of space keeps what it got: it filled the file system and left
  // the file at that size. A failure now gives the space back.
  Status Preallocate(uint64_t bytes, bool checked = false);
  Status ReadSuperblock();
  Status WriteSuperblock(const Superblock& sb);  // at offset 0, synced
  // Whether the superblock's place holds only zeros (or less than a superblock, all zeros).
  bool SuperblockNeverWritten() const;

  const int fd_;
  const std::string path_;
  const bool direct_io_;
  bool formatted_ = false;
  bool block_device_ = false;
  Superblock superblock_;
};

// An exclusive advisory lock (flock) on <dir>/kvtierd.lock, held while the object lives: one
// kvtierd per NVMe data directory, taken before anything there is wiped (a cold start) or opened.
class DirectoryLock {
 public:
  static constexpr std::string_view kFileName = "kvtierd.lock";
  // kBusy when another process (or another DirectoryLock) holds it; the translated errno of
  // open otherwise. A file system without flock is logged and let be.
  static Result<std::unique_ptr<DirectoryLock>> Acquire(const std::string& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  const int fd_;
};

}  // namespace kvtier::tiers::nvme
