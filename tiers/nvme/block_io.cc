#include "tiers/nvme/block_io.h"

#include <cstring>
#include <memory>
#include <vector>

#include "tiers/nvme/nvme_format.h"

namespace kvtier::tiers::nvme {
namespace {

struct Staging {
  AlignedBuffer header{kRecordHeaderBytes};
  AlignedBuffer bounce;
};

// One set per block of the largest batch the thread has planned. Held by pointer so that growing
// the list never moves a buffer a plan already points into.
Staging& ThreadStaging(size_t slot) {
  thread_local std::vector<std::unique_ptr<Staging>> staging;
  while (staging.size() <= slot) staging.push_back(std::make_unique<Staging>());
  return *staging[slot];
}

std::byte* Bounce(Staging& s, size_t bytes) {
  if (s.bounce.size() < bytes) s.bounce = AlignedBuffer(bytes);
  return s.bounce.data();
}

uint64_t RoundUp(uint64_t n) {
  return (n + kBlockAlignment - 1) / kBlockAlignment * kBlockAlignment;
}

// Bytes of a payload at `p` of `size` that can move without a bounce: whole 4 KiB units, and only
// when the buffer itself is aligned.
uint64_t DirectBytes(const std::byte* p, uint64_t size) {
  if (reinterpret_cast<uintptr_t>(p) % kBlockAlignment != 0) return 0;
  return size / kBlockAlignment * kBlockAlignment;
}

}  // namespace

BlockIo PlanWrite(int fd, uint64_t at, std::span<const std::byte> src, size_t slot) {
  Staging& s = ThreadStaging(slot);
  BlockIo plan;
  plan.header = s.header.span();
  plan.requests[plan.count++] = {IoOp::kWrite, fd, at, s.header.data(), kRecordHeaderBytes, {}};
  uint64_t direct = DirectBytes(src.data(), src.size());
  uint64_t payload_at = at + kRecordHeaderBytes;
  if (direct > 0) {
    // The backend only reads from a write buffer; IoRequest has one pointer type for both ops.
    plan.requests[plan.count++] = {IoOp::kWrite, fd, payload_at, const_cast<std::byte*>(src.data()),
                                   direct,       {}};
  }
  uint64_t tail = src.size() - direct;
  uint64_t padded = RoundUp(tail);
  if (tail > 0) {
    std::byte* bounce = Bounce(s, padded);
    std::memcpy(bounce, src.data() + direct, tail);
    std::memset(bounce + tail, 0, padded - tail);
    plan.requests[plan.count++] = {IoOp::kWrite, fd, payload_at + direct, bounce, padded, {}};
  }
  plan.device_bytes = kRecordHeaderBytes + direct + padded;
  return plan;
}

BlockIo PlanRead(int fd, uint64_t at, std::span<std::byte> dst, size_t slot) {
  Staging& s = ThreadStaging(slot);
  BlockIo plan;
  plan.header = s.header.span();
  plan.requests[plan.count++] = {IoOp::kRead, fd, at, s.header.data(), kRecordHeaderBytes, {}};
  uint64_t direct = DirectBytes(dst.data(), dst.size());
  uint64_t payload_at = at + kRecordHeaderBytes;
  if (direct > 0) {
    plan.requests[plan.count++] = {IoOp::kRead, fd, payload_at, dst.data(), direct, {}};
  }
  uint64_t tail = dst.size() - direct;
  uint64_t padded = RoundUp(tail);
  if (tail > 0) {
    std::byte* bounce = Bounce(s, padded);
    plan.requests[plan.count++] = {IoOp::kRead, fd, payload_at + direct, bounce, padded, {}};
    plan.copy_from = bounce;
    plan.copy_to = dst.data() + direct;
    plan.copy_bytes = tail;
  }
  plan.device_bytes = kRecordHeaderBytes + direct + padded;
  return plan;
}

void FinishRead(const BlockIo& plan) {
  if (plan.copy_bytes > 0) std::memcpy(plan.copy_to, plan.copy_from, plan.copy_bytes);
}

}  // namespace kvtier::tiers::nvme
