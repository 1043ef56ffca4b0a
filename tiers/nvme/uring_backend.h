// UringBackend: the io_uring (liburing) implementation of IoBackend.
//
// The backend owns `ring_count` rings of `queue_depth` entries. A Submit takes one free ring (or
// waits for the ring its thread hashes to), keeps up to queue_depth requests of the batch in flight
// on it, resubmits short and retried transfers, and returns the ring when the batch is complete. So
// each ring is driven by exactly one thread at a time and needs no locking inside liburing; more
// rings let more threads submit at once (the store's movers and readers).
//
// Registered region: split into chunks of at most 1 GiB (the kernel's limit per fixed buffer),
// registered on every ring; a request whose buffer lies in one chunk uses READ_FIXED / WRITE_FIXED.
//
// Ownership: each ring lives in one RAII Ring object and is torn down (io_uring_queue_exit) with it.
// Thread safety: as IoBackend.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "tiers/nvme/io_backend.h"

struct io_uring;

namespace kvtier::tiers::nvme {

class UringBackend final : public IoBackend {
 public:
  // Sets up the rings. On failure returns the translated error and stores the raw errno of
  // io_uring_queue_init in *err, so MakeIoBackend can tell a refusal (EPERM, ENOSYS) from a fault.
  static Result<std::unique_ptr<IoBackend>> Create(const IoBackendConfig& config, int* err);

  ~UringBackend() override;

  void Submit(std::span<IoRequest> requests) override;
  Status Sync(int fd) override;
  Status RegisterRegion(std::byte* base, uint64_t bytes) override;
  IoBackendKind kind() const override { return IoBackendKind::kIoUring; }
  uint32_t queue_depth() const override { return queue_depth_; }
  uint64_t in_flight() const override { return in_flight_.load(std::memory_order_relaxed); }
  uint64_t fixed_buffer_requests() const override {
    return fixed_requests_.load(std::memory_order_relaxed);
  }

 private:
  class Ring;
  struct BatchState;
  struct Chunk {
    std::byte* base;
    uint64_t bytes;
  };

  UringBackend(const IoBackendConfig& config, std::vector<std::unique_ptr<Ring>> rings);

  Ring& AcquireRing();
  void RunBatch(Ring& ring, std::span<IoRequest> requests);
  void FillRing(io_uring* ring, BatchState& batch);
  void WithdrawUnsubmitted(io_uring* ring, BatchState& batch, int rc);
  void Reap(io_uring* ring, BatchState& batch);
  // Index of the registered chunk holding [buffer, buffer + length), or -1.
  int FixedIndex(const std::byte* buffer, uint64_t length) const;

  const uint32_t queue_depth_;
  const std::shared_ptr<CompletionFilter> filter_;
  std::vector<std::unique_ptr<Ring>> rings_;
  std::vector<Chunk> chunks_;  // written once by RegisterRegion, before any Submit
  std::atomic<uint64_t> in_flight_{0};
  std::atomic<uint64_t> fixed_requests_{0};
};

}  // namespace kvtier::tiers::nvme
