// HostArena: one shared-memory mapping that holds the host tier's block bytes.
//
// The arena is a memfd, sized once and mapped MAP_SHARED, so that the daemon can pass fd() to a
// client on the same node (SCM_RIGHTS) and the client maps the same pages: one copy between the
// engine's KV memory and a slot, no socket in the data path. The memfd is sealed against growing
// and shrinking, because a client that truncated it would make the daemon's own accesses fault
// (SIGBUS). Huge pages and mlock are best effort: a host without reserved huge pages or with a
// low RLIMIT_MEMLOCK still gets a working arena, and huge_pages()/locked() say what it got.
//
// Ownership: the arena owns the fd and the mapping and releases both in its destructor; it is
// neither copyable nor movable (hold it by unique_ptr). It does not know which bytes are in use
// (that is the SlabAllocator's job). Thread safety: every accessor is const and may be called from
// any thread; the bytes themselves are synchronised by whoever owns each extent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace kvtier::tiers {

class HostArena {
 public:
  struct Options {
    uint64_t capacity_bytes = 0;
    std::string name = "kvtier-host";  // shows in /proc/<pid>/fd as "/memfd:<name>"
    // Try hugetlbfs pages (only when capacity_bytes is a multiple of 2 MiB), otherwise advise
    // transparent huge pages. Huge pages cut TLB misses on large copies.
    bool try_huge_pages = true;
    // Lock the pages in RAM so blocks are never swapped out and stay valid for DMA.
    bool try_mlock = true;
  };

  // Creates, sizes and maps the memfd. Errors: kInvalidArgument for capacity_bytes 0; otherwise
  // the translated errno of memfd_create, ftruncate or mmap (kBusy for ENOMEM: ask for less).
  // Huge-page, sealing and mlock failures are not errors; see the accessors below.
  static Result<std::unique_ptr<HostArena>> Create(const Options& options);

  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  // The memfd, for passing to clients. Owned by the arena: do not close it; a client receives its
  // own duplicate through SCM_RIGHTS.
  int fd() const { return fd_; }
  std::byte* base() const { return base_; }
  uint64_t size() const { return size_bytes_; }

  // True when the arena is backed by hugetlbfs pages (MFD_HUGETLB).
  bool huge_pages() const { return huge_pages_; }
  // True when madvise(MADV_HUGEPAGE) was accepted (transparent huge pages, not guaranteed).
  bool thp_advised() const { return thp_advised_; }
  // True when the memfd is sealed against resizing.
  bool sealed() const { return sealed_; }
  // True when mlock succeeded; lock_status() says why not (OK when mlock was not asked for).
  bool locked() const { return locked_; }
  const Status& lock_status() const { return lock_status_; }

 private:
  HostArena(int fd, std::byte* base, uint64_t size_bytes, bool huge_pages);

  // The best-effort steps that follow a successful mapping; each records its outcome.
  void SealSize();
  void AdviseHugePages();
  void TryLock();

  const int fd_;
  std::byte* const base_;
  const uint64_t size_bytes_;
  const bool huge_pages_;
  bool thp_advised_ = false;
  bool sealed_ = false;
  bool locked_ = false;
  Status lock_status_;
};

}  // namespace kvtier::tiers
