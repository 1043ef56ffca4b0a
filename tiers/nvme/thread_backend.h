// ThreadBackend: the pread/pwrite thread-pool implementation of IoBackend.
//
// The fallback where io_uring is refused (seccomp, kernel.io_uring_disabled, old kernels) and a
// second opinion in tests. `queue_depth` named worker threads ("kvt-nvme-io-N") take requests from
// one queue; a Submit enqueues its batch and waits until every request of it is done, so up to
// queue_depth transfers are in the kernel at once, as with a ring of that depth. The same retry rules
// as io_uring apply (tiers/nvme/io_retry.h). A registered region changes nothing here: pread and
// pwrite copy from any address.
//
// Ownership: the backend owns its workers and joins them in its destructor (after the queue has
// drained; a Submit in progress at destruction is a caller bug). Thread safety: as IoBackend.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tiers/nvme/io_backend.h"

namespace kvtier::tiers::nvme {

class ThreadBackend final : public IoBackend {
 public:
  static Result<std::unique_ptr<IoBackend>> Create(const IoBackendConfig& config);
  ~ThreadBackend() override;

  void Submit(std::span<IoRequest> requests) override;
  Status Sync(int fd) override;
  Status RegisterRegion(std::byte* base, uint64_t bytes) override;
  IoBackendKind kind() const override { return IoBackendKind::kThreads; }
  uint32_t queue_depth() const override { return queue_depth_; }
  uint64_t in_flight() const override { return in_flight_.load(std::memory_order_relaxed); }
  uint64_t fixed_buffer_requests() const override { return 0; }

 private:
  // The requests of one Submit still running; the submitter waits on `done`.
  struct Batch {
    std::mutex mu;
    std::condition_variable done;
    size_t remaining = 0;
  };
  struct Task {
    IoRequest* request;
    Batch* batch;
  };

  explicit ThreadBackend(const IoBackendConfig& config);
  void WorkerLoop();
  void Run(IoRequest& request);

  const uint32_t queue_depth_;
  const std::shared_ptr<CompletionFilter> filter_;
  std::mutex mu_;
  std::condition_variable work_;
  std::deque<Task> queue_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  std::atomic<uint64_t> in_flight_{0};
  std::vector<std::thread> workers_;
};

}  // namespace kvtier::tiers::nvme
