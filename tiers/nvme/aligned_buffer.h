// AlignedBuffer: a heap buffer aligned for O_DIRECT transfers (4 KiB), freed on destruction.
//
// Used by the NVMe tier for record headers and bounce buffers, and by its tests for payloads.
// Not synchronised; move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>

namespace kvtier::tiers::nvme {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 4096;

  AlignedBuffer() = default;
  // Zero-filled; size is rounded up to kAlignment for the allocation, size() reports `bytes`.
  explicit AlignedBuffer(size_t bytes) : size_(bytes) {
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded == 0) return;
    data_.reset(static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded)));
    if (data_) std::memset(data_.get(), 0, rounded);
  }

  std::byte* data() const { return data_.get(); }
  size_t size() const { return data_ ? size_ : 0; }
  std::span<std::byte> span() const { return {data(), size()}; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

}  // namespace kvtier::tiers::nvme
