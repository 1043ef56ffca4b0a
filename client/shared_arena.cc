#include "client/shared_arena.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <string>
#include <utility>

namespace kvtier::client {

SharedArena::~SharedArena() { Unmap(); }

SharedArena::SharedArena(SharedArena&& other) noexcept
    : fd_(std::move(other.fd_)),
      base_(std::exchange(other.base_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

SharedArena& SharedArena::operator=(SharedArena&& other) noexcept {
  if (this != &other) {
    Unmap();
    fd_ = std::move(other.fd_);
    base_ = std::exchange(other.base_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

void SharedArena::Unmap() {
  if (base_ != nullptr) ::munmap(base_, size_bytes_);
  base_ = nullptr;
  size_bytes_ = 0;
  fd_.reset();
}

Result<SharedArena> SharedArena::Map(UniqueFd fd, uint64_t expected_bytes) {
  if (!fd.valid()) return InvalidArgument("arena: no file descriptor received");
  struct stat st {};
  if (::fstat(fd.get(), &st) < 0) return ErrnoStatus(errno, "arena: fstat");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return InvalidArgument("arena: the received file is empty");
  if (expected_bytes != 0 && expected_bytes != size) {
    return InvalidArgument("arena: the daemon announced " + std::to_string(expected_bytes) +
                           " bytes but the received file has " + std::to_string(size));
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return ErrnoStatus(errno, "arena: mmap");
  return SharedArena(std::move(fd), static_cast<std::byte*>(base), static_cast<size_t>(size));
}

std::byte* SharedArena::Slice(uint64_t offset, uint64_t length) const {
  if (base_ == nullptr || offset > size_bytes_ || length > size_bytes_ - offset) return nullptr;
  return base_ + offset;
}

}  // namespace kvtier::client
