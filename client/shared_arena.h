// SharedArena: this process's mapping of the daemon's host arena (a memfd received with
// KVT.ATTACH), through which the shared-memory Put and Get copy block bytes.
//
// The arena owns the descriptor and the mapping and releases both on destruction. Offsets come
// from the daemon, which is trusted with placement but not with memory safety: Slice() checks
// that a range lies inside the mapping before handing out a pointer. The bytes themselves are
// shared with the daemon and other clients; the reserve/commit and acquire/release protocol,
// not this class, says who may touch which range when. Move-only; the object itself is not
// synchronised, but slices may be used from any thread while the arena is alive.
#pragma once

#include <cstddef>
#include <cstdint>

#include "client/unique_fd.h"
#include "common/status.h"

namespace kvtier::client {

class SharedArena {
 public:
  SharedArena() = default;
  ~SharedArena();
  SharedArena(SharedArena&& other) noexcept;
  SharedArena& operator=(SharedArena&& other) noexcept;
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  // Maps all of `fd` (its size from fstat) read-write and shared. `expected_bytes`, when non-zero,
  // must equal that size: a mismatch means the descriptor is not the arena the daemon described.
  // Errors: kInvalidArgument for an invalid descriptor, an empty file or a size mismatch;
  // otherwise the translated errno of fstat or mmap.
  static Result<SharedArena> Map(UniqueFd fd, uint64_t expected_bytes);

  bool mapped() const { return base_ != nullptr; }
  size_t size_bytes() const { return size_bytes_; }
  std::byte* base() const { return base_; }

  // A pointer to [offset, offset + length), or nullptr when the range does not lie inside the
  // mapping (or nothing is mapped).
  std::byte* Slice(uint64_t offset, uint64_t length) const;

 private:
  SharedArena(UniqueFd fd, std::byte* base, size_t size_bytes)
      : fd_(std::move(fd)), base_(base), size_bytes_(size_bytes) {}
  void Unmap();

  UniqueFd fd_;
  std::byte* base_ = nullptr;
  size_t size_bytes_ = 0;
};

}  // namespace kvtier::client
