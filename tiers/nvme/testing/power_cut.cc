#include "tiers/nvme/testing/power_cut.h"

#include <fcntl.h>
#include <unistd.h>

#include <random>

#include "tiers/nvme/aligned_buffer.h"

namespace kvtier::tiers::nvme::testing {
namespace {

std::string PathOf(int fd) {
  char buf[4096];
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

void WriteBack(const std::string& path, uint64_t offset, const std::byte* bytes, size_t n) {
  int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) return;
  if (::pwrite(fd, bytes, n, static_cast<off_t>(offset)) < 0) {
    // Best effort: a test that relies on this revert fails its checks instead.
  }
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void PowerCutJournal::Record(int fd, uint64_t offset, uint64_t length) {
  AlignedBuffer old(length);
  if (old.data() == nullptr) return;  // a test with absurd writes; its checks will say so
  ssize_t n = ::pread(fd, old.data(), length, static_cast<off_t>(offset));
  Undo undo{fd, PathOf(fd), offset, {}};
  undo.old_bytes.assign(old.data(), old.data() + (n > 0 ? n : 0));
  std::lock_guard<std::mutex> lock(mu_);
  undo_.push_back(std::move(undo));
}

void PowerCutJournal::Synced(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(undo_, [fd](const Undo& u) { return u.fd == fd; });
}

void PowerCutJournal::Cut() {
  std::lock_guard<std::mutex> lock(mu_);
  cut_ = true;
}

bool PowerCutJournal::cut() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cut_;
}

uint64_t PowerCutJournal::unsynced_writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return undo_.size();
}

uint64_t PowerCutJournal::Revert(RevertMode mode, uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  std::mt19937_64 rng(seed);
  uint64_t undone = 0;
  // Newest first, so that fully undoing every write restores the state of the last sync.
  for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
    const Undo& u = *it;
    size_t sectors = (u.old_bytes.size() + 4095) / 4096;
    if (sectors == 0) continue;
    size_t first = 0, count = sectors;
    if (mode == RevertMode::kRandom) {
      int choice = static_cast<int>(rng() % 3);
      if (choice == 0) continue;  // this write reached the media
      if (choice == 2) {          // torn: a random run of sectors is lost
        first = rng() % sectors;
        count = 1 + rng() % (sectors - first);
      }
    }
    size_t begin = first * 4096;
    size_t end = std::min(u.old_bytes.size(), (first + count) * 4096);
    WriteBack(u.path, u.offset + begin, u.old_bytes.data() + begin, end - begin);
    ++undone;
  }
  undo_.clear();
  return undone;
}

void PowerCutBackend::Submit(std::span<IoRequest> requests) {
  if (journal_->cut()) {
    // The machine is off: writes vanish, reads see what is there.
    for (IoRequest& r : requests) {
      if (r.op == IoOp::kWrite) r.status = Status::Ok();
    }
    std::vector<IoRequest> reads;
    for (IoRequest& r : requests) {
      if (r.op == IoOp::kRead) reads.push_back(r);
    }
    inner_->Submit(reads);
    size_t next = 0;
    for (IoRequest& r : requests) {
      if (r.op == IoOp::kRead) r.status = reads[next++].status;
    }
    return;
  }
  for (const IoRequest& r : requests) {
    if (r.op == IoOp::kWrite) journal_->Record(r.fd, r.offset, r.length);
  }
  inner_->Submit(requests);
}

Status PowerCutBackend::Sync(int fd) {
  if (journal_->cut()) return Status::Ok();
  KVTIER_RETURN_IF_ERROR(inner_->Sync(fd));
  journal_->Synced(fd);
  return Status::Ok();
}

namespace {

// A writable file whose appended and synced lengths DropUnsyncedFs tracks.
class TrackedFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  TrackedFile(std::unique_ptr<rocksdb::FSWritableFile> file, std::string name, DropUnsyncedFs* fs)
      : FSWritableFileOwnerWrapper(std::move(file)), name_(std::move(name)), fs_(fs) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* dbg) override {
    if (fs_->IsCut()) return rocksdb::IOStatus::IOError("power cut");
    fs_->Appended(name_, data.size());
    return FSWritableFileOwnerWrapper::Append(data, o, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    if (fs_->IsCut()) return rocksdb::IOStatus::IOError("power cut");
    fs_->Appended(name_, data.size());
    return FSWritableFileOwnerWrapper::Append(data, o, info, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (fs_->IsCut()) return rocksdb::IOStatus::IOError("power cut");
    rocksdb::IOStatus s = FSWritableFileOwnerWrapper::Sync(o, dbg);
    if (s.ok()) fs_->SyncedFile(name_);
    return s;
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (fs_->IsCut()) return rocksdb::IOStatus::IOError("power cut");
    rocksdb::IOStatus s = FSWritableFileOwnerWrapper::Fsync(o, dbg);
    if (s.ok()) fs_->SyncedFile(name_);
    return s;
  }

 private:
  const std::string name_;
  DropUnsyncedFs* const fs_;
};

}  // namespace

rocksdb::IOStatus DropUnsyncedFs::NewWritableFile(const std::string& fname,
                                                  const rocksdb::FileOptions& opts,
                                                  std::unique_ptr<rocksdb::FSWritableFile>* result,
                                                  rocksdb::IODebugContext* dbg) {
  if (IsCut()) return rocksdb::IOStatus::IOError("power cut");
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s = target()->NewWritableFile(fname, opts, &file, dbg);
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    files_[fname] = FileState{};
  }
  *result = std::make_unique<TrackedFile>(std::move(file), fname, this);
  return s;
}

rocksdb::IOStatus DropUnsyncedFs::ReopenWritableFile(
    const std::string& fname, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* result, rocksdb::IODebugContext* dbg) {
  if (IsCut()) return rocksdb::IOStatus::IOError("power cut");
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s = target()->ReopenWritableFile(fname, opts, &file, dbg);
  if (!s.ok()) return s;
  uint64_t size = 0;
  (void)target()->GetFileSize(fname, rocksdb::IOOptions(), &size, dbg);
  {
    std::lock_guard<std::mutex> lock(mu_);
    files_[fname] = FileState{size, size};  // what was there before is durable
  }
  *result = std::make_unique<TrackedFile>(std::move(file), fname, this);
  return s;
}

rocksdb::IOStatus DropUnsyncedFs::RenameFile(const std::string& src, const std::string& target,
                                             const rocksdb::IOOptions& opts,
                                             rocksdb::IODebugContext* dbg) {
  if (IsCut()) return rocksdb::IOStatus::IOError("power cut");
  rocksdb::IOStatus s = FileSystemWrapper::RenameFile(src, target, opts, dbg);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(src);
    if (it != files_.end()) {
      files_[target] = it->second;
      files_.erase(src);
    }
  }
  return s;
}

rocksdb::IOStatus DropUnsyncedFs::DeleteFile(const std::string& fname,
                                             const rocksdb::IOOptions& opts,
                                             rocksdb::IODebugContext* dbg) {
  if (IsCut()) return rocksdb::IOStatus::IOError("power cut");
  rocksdb::IOStatus s = FileSystemWrapper::DeleteFile(fname, opts, dbg);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(fname);
  }
  return s;
}

void DropUnsyncedFs::Cut() {
  std::lock_guard<std::mutex> lock(mu_);
  cut_ = true;
}

bool DropUnsyncedFs::IsCut() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cut_;
}

void DropUnsyncedFs::Appended(const std::string& fname, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[fname].size += bytes;
}

void DropUnsyncedFs::SyncedFile(const std::string& fname) {
  std::lock_guard<std::mutex> lock(mu_);
  FileState& f = files_[fname];
  f.synced = f.size;
}

uint64_t DropUnsyncedFs::Revert() {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t dropped = 0;
  for (const auto& [name, state] : files_) {
    if (state.size <= state.synced) continue;
    if (::truncate(name.c_str(), static_cast<off_t>(state.synced)) == 0) {
      dropped += state.size - state.synced;
    }
  }
  files_.clear();
  cut_ = false;
  return dropped;
}

}  // namespace kvtier::tiers::nvme::testing
