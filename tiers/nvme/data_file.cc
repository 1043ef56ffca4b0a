#include "tiers/nvme/data_file.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "common/clock.h"
#include "common/units.h"
#include "tiers/nvme/aligned_buffer.h"

namespace kvtier::tiers::nvme {
namespace {

uint64_t RandomFileId() {
  std::random_device rd;
  uint64_t id = (uint64_t{rd()} << 32) ^ rd() ^ UnixMicros();
  return id == 0 ? 1 : id;
}

// Opens with O_DIRECT when asked and accepted; *direct says what was obtained.
Result<int> OpenFile(const std::string& path, bool want_direct, bool* direct) {
  int flags = O_RDWR | O_CREAT | O_CLOEXEC;
  if (want_direct) {
    int fd = ::open(path.c_str(), flags | O_DIRECT, 0600);
    if (fd >= 0) {
      *direct = true;
      return fd;
    }
    if (errno != EINVAL) return ErrnoStatus(errno, "open " + path);
    spdlog::warn(
        "nvme: {} refuses O_DIRECT; using buffered I/O (the page cache will also hold "
        "NVMe blocks)",
        path);
  }
  *direct = false;
  int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) return ErrnoStatus(errno, "open " + path);
  return fd;
}

// An exclusive flock on `fd`; false when another open file holds it. Waits a little for it: a
// daemon killed a moment ago lets go of its files only once the kernel has torn its io_uring
// down, which holds them until the requests in flight end (milliseconds) after the process is
// gone. A file system without flock is logged and let be.
bool LockExclusive(int fd, const std::string& path) {
  constexpr auto kPatience = std::chrono::seconds(2);
  const auto give_up = std::chrono::steady_clock::now() + kPatience;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      spdlog::warn("nvme: could not lock {}: {}", path, std::strerror(errno));
      return true;
    }
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<DataFile>> DataFile::Open(const Options& options) {
  uint64_t capacity = options.capacity_bytes / kBlockAlignment * kBlockAlignment;
  if (capacity < 2 * kBlockAlignment) {
    return InvalidArgument("nvme capacity_bytes must be at least " +
                           std::to_string(2 * kBlockAlignment) + ", not " +
                           std::to_string(options.capacity_bytes));
  }
  bool direct = false;
  KVTIER_ASSIGN_OR_RETURN(int fd, OpenFile(options.path, options.direct_io, &direct));
  std::unique_ptr<DataFile> file(new DataFile(fd, options.path, direct));
  // Before anything is read or formatted: two daemons, or one path named twice under two names
  // (a device and its /dev/disk/by-id link), would overwrite each other's blocks.
  if (!LockExclusive(fd, options.path)) {
    return Busy(options.path +
                " is in use: another kvtierd has it open, or nvme.data_paths names it twice");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "stat " + options.path);
  if (S_ISBLK(st.st_mode)) {
    KVTIER_RETURN_IF_ERROR(file->OpenDevice(capacity, options));
    return file;
  }
  if (st.st_size == 0 || options.reformat) {
    KVTIER_RETURN_IF_ERROR(file->Format(capacity));
    return file;
  }
  if (Status read = file->ReadSuperblock(); !read.ok() || file->superblock_.capacity_bytes == 0) {
    // A superblock of capacity 0, or (the first write not out yet) a page of zeros at most.
    const bool zeros =
        !read.ok() && read.code() == StatusCode::kCorruption && file->SuperblockNeverWritten();
    const bool cut_short =
        read.ok() || (zeros && static_cast<uint64_t>(st.st_size) <= kSuperblockBytes);
    if (!cut_short && zeros) {
      return Corruption(read.message() +
                        "; its first 4 KiB are zeros, and it is left as it is: "
                        "name another file in nvme.data_paths, or remove this one");
    }
    if (!cut_short) return read;
    spdlog::warn("nvme: {} was being formatted when kvtierd stopped; formatting it", options.path);
    KVTIER_RETURN_IF_ERROR(file->Format(capacity));
    return file;
  }
  if (options.keep_formatted_capacity && file->superblock_.capacity_bytes != capacity) {
    spdlog::info("nvme: {} keeps its capacity of {} bytes (the automatic size is {} today)",
                 options.path, file->superblock_.capacity_bytes, capacity);
    capacity = file->superblock_.capacity_bytes;
  }
  if (file->superblock_.capacity_bytes != capacity) {
    spdlog::warn(
        "nvme: {} was formatted for {} bytes, configured for {}; reformatting (the cold "
        "cache starts empty)",
        options.path, file->superblock_.capacity_bytes, capacity);
    KVTIER_RETURN_IF_ERROR(file->Format(capacity));
  } else if (static_cast<uint64_t>(st.st_size) < file->data_offset() + capacity) {
    // A truncated file: grow it back; records beyond the old end fail their header check.
    KVTIER_RETURN_IF_ERROR(file->Preallocate(file->data_offset() + capacity));
  }
  return file;
}

// A raw block device is never formatted unasked: it may hold something else. Only `reformat` (a
// forced cold start) writes a superblock; otherwise it must already carry ours, of this capacity
// (or of any that fits the device, with keep_formatted_capacity).
Status DataFile::OpenDevice(uint64_t capacity, const Options& options) {
  block_device_ = true;
  uint64_t device_bytes = 0;
  if (::ioctl(fd_, BLKGETSIZE64, &device_bytes) != 0) {
    return ErrnoStatus(errno, "size of block device " + path_);
  }
  const bool keep = options.keep_formatted_capacity && !options.reformat;
  if (keep) {
    KVTIER_RETURN_IF_ERROR(ReadSuperblock());
    capacity = superblock_.capacity_bytes;
  }
  if (kSuperblockBytes + capacity > device_bytes) {
    return InvalidArgument("nvme capacity_bytes " + std::to_string(capacity) +
                           " does not fit block device " + path_ + " of " +
                           std::to_string(device_bytes) + " bytes (after a 4096-byte superblock)");
  }
  if (options.reformat) {
    KVTIER_RETURN_IF_ERROR(Format(capacity));
  } else if (!keep) {
    KVTIER_RETURN_IF_ERROR(ReadSuperblock());
    if (superblock_.capacity_bytes != capacity) {
      return InvalidArgument("block device " + path_ + " was formatted for " +
                             std::to_string(superblock_.capacity_bytes) +
                             " bytes, configured for " + std::to_string(capacity) +
                             "; force a cold start to reformat it");
    }
  }
  return Status::Ok();
}

DataFile::DataFile(int fd, std::string path, bool direct_io)
    : fd_(fd), path_(std::move(path)), direct_io_(direct_io) {}

DataFile::~DataFile() { ::close(fd_); }

// Writes a fresh superblock after allocating the whole file. A file is first cut to nothing and
// given a superblock of capacity 0 (synced): "being formatted". The superblock of the format's
// capacity goes last and is synced. So a crash while formatting leaves an empty file, 4 KiB at
// most of zeros (the first write's page not yet out), or one being formatted, which Open formats
// again, never one that looks valid with the wrong size; and Open can tell a file of someone
// else's, whose first 4 KiB happen to be zeros, from one of these.
Status DataFile::Format(uint64_t capacity_bytes) {
  Superblock sb;
  sb.capacity_bytes = capacity_bytes;
  sb.file_id = RandomFileId();
  sb.created_unix_us = UnixMicros();
  if (!block_device_) {
    // Checked before the truncate: a size refused must leave the old cache where it was.
    KVTIER_RETURN_IF_ERROR(CheckRoomFor(sb.data_offset + capacity_bytes));
    if (::ftruncate(fd_, 0) != 0) return ErrnoStatus(errno, "truncate " + path_);
    Superblock being_formatted = sb;
    being_formatted.capacity_bytes = 0;
    KVTIER_RETURN_IF_ERROR(WriteSuperblock(being_formatted));
    KVTIER_RETURN_IF_ERROR(Preallocate(sb.data_offset + capacity_bytes, /*checked=*/true));
  }
  KVTIER_RETURN_IF_ERROR(WriteSuperblock(sb));
  superblock_ = sb;
  formatted_ = true;
  return Status::Ok();
}

Status DataFile::WriteSuperblock(const Superblock& sb) {
  AlignedBuffer buf(kSuperblockBytes);
  if (buf.data() == nullptr) return Busy("nvme: out of memory for a superblock buffer");
  EncodeSuperblock(sb, buf.span());
  if (::pwrite(fd_, buf.data(), kSuperblockBytes, 0) != static_cast<ssize_t>(kSuperblockBytes)) {
    return ErrnoStatus(errno == 0 ? EIO : errno, "write superblock of " + path_);
  }
  if (::fdatasync(fd_) != 0) return ErrnoStatus(errno, "fdatasync " + path_);
  return Status::Ok();
}

Status DataFile::CheckRoomFor(uint64_t bytes) const {
  struct stat st {};
  struct statvfs fs {};
  if (::fstat(fd_, &st) != 0) return ErrnoStatus(errno, "stat " + path_);
  if (::fstatvfs(fd_, &fs) != 0) return ErrnoStatus(errno, "statvfs " + path_);
  const uint64_t held = static_cast<uint64_t>(st.st_blocks) * 512;
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (bytes > held && bytes - held > free_bytes) {
    return Rejected("NVMe data file " + path_ + " needs " + FormatBytes(bytes - held) +
                    " more for its capacity, and its file system has " + FormatBytes(free_bytes) +
                    " free: lower nvme.bytes (--nvme-bytes), or free space there");
  }
  return Status::Ok();
}

Status DataFile::Preallocate(uint64_t bytes, bool checked) {
  if (!checked) KVTIER_RETURN_IF_ERROR(CheckRoomFor(bytes));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return ErrnoStatus(errno, "stat " + path_);
  const int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
  if (rc == 0) return Status::Ok();
  if (::ftruncate(fd_, st.st_size) != 0) {
    spdlog::warn("nvme: {} could not be cut back to {} bytes after a failed allocation: {}", path_,
                 st.st_size, std::strerror(errno));
  }
  return ErrnoStatus(rc, "posix_fallocate " + path_);
}

bool DataFile::SuperblockNeverWritten() const {
  AlignedBuffer buf(kSuperblockBytes);  // aligned: the file may be open with O_DIRECT
  if (buf.data() == nullptr) return false;
  const ssize_t n = ::pread(fd_, buf.data(), kSuperblockBytes, 0);
  if (n < 0) return false;
  const std::span<const std::byte> read = buf.span().first(static_cast<size_t>(n));
  return std::all_of(read.begin(), read.end(), [](std::byte b) { return b == std::byte{0}; });
}

Status DataFile::ReadSuperblock() {
  AlignedBuffer buf(kSuperblockBytes);
  if (buf.data() == nullptr) return Busy("nvme: out of memory for a superblock buffer");
  ssize_t n = ::pread(fd_, buf.data(), kSuperblockBytes, 0);
  if (n < 0) return ErrnoStatus(errno, "read superblock of " + path_);
  if (n != static_cast<ssize_t>(kSuperblockBytes)) {
    return Corruption(path_ + " is too short to be a kvtier NVMe data file");
  }
  KVTIER_ASSIGN_OR_RETURN(superblock_, DecodeSuperblock(buf.span(), path_));
  return Status::Ok();
}

Result<std::unique_ptr<DirectoryLock>> DirectoryLock::Acquire(const std::string& dir) {
  const std::string path = dir + "/" + std::string(kFileName);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, "open " + path);
  std::unique_ptr<DirectoryLock> lock(new DirectoryLock(fd));
  if (!LockExclusive(fd, path)) {
    return Busy("nvme data_dir " + dir + " is in use by another kvtierd (it holds " + path + ")");
  }
  return lock;
}

DirectoryLock::~DirectoryLock() { ::close(fd_); }

}  // namespace kvtier::tiers::nvme
