// Block I/O plans: the requests that move one block (record header + payload) between memory and
// its extent with aligned direct I/O.
//
// Internal to NvmeTier. The header always travels through a 4 KiB staging buffer. A payload whose
// buffer is 4 KiB-aligned goes straight to or from the device for its whole 4 KiB multiples (host
// arena slots: zero copy); its last partial 4 KiB, or the whole payload when the buffer is not
// aligned, goes through a bounce buffer and is copied. Staging and bounce buffers are per thread
// and per `slot` (the block's position in a batch the thread submits at once) and grow to the
// largest block the thread has moved: no allocation per block once warm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "tiers/nvme/aligned_buffer.h"
#include "tiers/nvme/io_backend.h"

namespace kvtier::tiers::nvme {

struct BlockIo {
  IoRequest requests[3];
  size_t count = 0;
  std::span<IoRequest> batch() { return {requests, count}; }
  // The header's bytes (staging), valid until the thread's next plan for the same slot.
  std::span<std::byte> header;
  // Reads: bytes to copy from the bounce buffer into the caller's buffer after the batch completes.
  const std::byte* copy_from = nullptr;
  std::byte* copy_to = nullptr;
  size_t copy_bytes = 0;
  uint64_t device_bytes = 0;  // bytes the batch moves to or from the device
};

// Plans writing a block to the extent at file offset `at`. The caller fills plan.header with the
// encoded record header before submitting. `src` must stay valid until the batch completes. The
// blocks of one batch use slots 0, 1, 2, ...
BlockIo PlanWrite(int fd, uint64_t at, std::span<const std::byte> src, size_t slot = 0);

// Plans reading a block of dst.size() payload bytes from file offset `at`. After the batch
// completes without error, call FinishRead.
BlockIo PlanRead(int fd, uint64_t at, std::span<std::byte> dst, size_t slot = 0);
void FinishRead(const BlockIo& plan);

}  // namespace kvtier::tiers::nvme
