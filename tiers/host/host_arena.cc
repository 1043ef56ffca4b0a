#include "tiers/host/host_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <limits>
#include <utility>

namespace kvtier::tiers {
namespace {

// The default hugetlbfs page size on x86-64 and arm64 (4 KiB base pages). Where the default is
// another size, the hugetlb attempt fails cleanly and the arena falls back to normal pages.
constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

struct Mapping {
  int fd = -1;
  std::byte* base = nullptr;
};

// Creates a memfd with `flags`, sizes it and maps it shared. On failure nothing is left open.
// For hugetlb, mmap reserves the pages, so a host with too few free huge pages fails here (ENOMEM)
// rather than with SIGBUS on first touch.
Result<Mapping> MapMemfd(const std::string& name, uint64_t size_bytes, unsigned int flags) {
  const int fd = memfd_create(name.c_str(), flags);
  if (fd < 0) return ErrnoStatus(errno, "memfd_create " + name);
  if (ftruncate(fd, static_cast<off_t>(size_bytes)) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, "ftruncate memfd " + name);
  }
  void* base = mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, "mmap memfd " + name);
  }
  return Mapping{fd, static_cast<std::byte*>(base)};
}

}  // namespace

Result<std::unique_ptr<HostArena>> HostArena::Create(const Options& options) {
  const uint64_t size_bytes = options.capacity_bytes;
  if (size_bytes == 0 || size_bytes > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return InvalidArgument("host arena capacity_bytes must be between 1 and 2^63-1, got " +
                           std::to_string(size_bytes));
  }
  // Sealing lets the daemon hand the fd to clients without trusting them to leave its size alone.
  constexpr unsigned int kFlags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  std::unique_ptr<HostArena> arena;
  if (options.try_huge_pages && size_bytes % kHugePageBytes == 0) {
    // Failure is expected on most hosts (no pages reserved in /proc/sys/vm/nr_hugepages).
    Result<Mapping> huge = MapMemfd(options.name, size_bytes, kFlags | MFD_HUGETLB);
    if (huge.ok()) arena.reset(new HostArena(huge->fd, huge->base, size_bytes, true));
  }
  if (arena == nullptr) {
    KVTIER_ASSIGN_OR_RETURN(Mapping mapping, MapMemfd(options.name, size_bytes, kFlags));
    arena.reset(new HostArena(mapping.fd, mapping.base, size_bytes, false));
    if (options.try_huge_pages) arena->AdviseHugePages();
  }
  arena->SealSize();
  if (options.try_mlock) arena->TryLock();
  return arena;
}

HostArena::HostArena(int fd, std::byte* base, uint64_t size_bytes, bool huge_pages)
    : fd_(fd), base_(base), size_bytes_(size_bytes), huge_pages_(huge_pages) {}

HostArena::~HostArena() {
  munmap(base_, size_bytes_);  // also drops the mlock
  close(fd_);
}

void HostArena::SealSize() {
  // F_SEAL_SEAL too, so that nobody holding the fd can add seals the daemon does not expect.
  sealed_ = fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0;
}

void HostArena::AdviseHugePages() {
  // Effective only where /sys/kernel/mm/transparent_hugepage/shmem_enabled allows it.
  thp_advised_ = madvise(base_, size_bytes_, MADV_HUGEPAGE) == 0;
}

void HostArena::TryLock() {
  // mlock also faults every page in, so the arena's RAM is committed at start-up rather than on
  // the first put; failure (usually RLIMIT_MEMLOCK) leaves a working, swappable arena.
  if (mlock(base_, size_bytes_) == 0) {
    locked_ = true;
    lock_status_ = Status::Ok();
  } else {
    lock_status_ = ErrnoStatus(errno, "mlock host arena");
  }
}

}  // namespace kvtier::tiers
