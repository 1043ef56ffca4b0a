#include "tiers/nvme/thread_backend.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "tiers/nvme/io_retry.h"

namespace kvtier::tiers::nvme {
namespace {

constexpr std::string_view kEngine = "pread/pwrite";
constexpr uint64_t kMaxCallBytes = uint64_t{1} << 30;

}  // namespace

Result<std::unique_ptr<IoBackend>> ThreadBackend::Create(const IoBackendConfig& config) {
  return std::unique_ptr<IoBackend>(new ThreadBackend(config));
}

ThreadBackend::ThreadBackend(const IoBackendConfig& config)
    : queue_depth_(config.queue_depth), filter_(config.fault_filter) {
  for (uint32_t i = 0; i < queue_depth_; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
    std::string name = "kvt-nvme-io-" + std::to_string(i);
    pthread_setname_np(workers_.back().native_handle(), name.substr(0, 15).c_str());
  }
}

ThreadBackend::~ThreadBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& t : workers_) t.join();
}

Status ThreadBackend::RegisterRegion(std::byte* base, uint64_t bytes) {
  if (base == nullptr || bytes == 0) return InvalidArgument("empty io region");
  return Status::Ok();
}

Status ThreadBackend::Sync(int fd) { return internal::SyncFd(fd, kEngine); }

void ThreadBackend::Submit(std::span<IoRequest> requests) {
  if (requests.empty()) return;
  Batch batch;
  batch.remaining = requests.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (IoRequest& r : requests) queue_.push_back({&r, &batch});
  }
  work_.notify_all();
  std::unique_lock<std::mutex> lock(batch.mu);
  batch.done.wait(lock, [&] { return batch.remaining == 0; });
}

void ThreadBackend::WorkerLoop() {
  for (;;) {
    Task task{};
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to do
      task = queue_.front();
      queue_.pop_front();
    }
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    Run(*task.request);
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(task.batch->mu);
    if (--task.batch->remaining == 0) task.batch->done.notify_one();
  }
}

// One request to completion: one pread/pwrite per piece, with the shared retry rules.
void ThreadBackend::Run(IoRequest& request) {
  internal::IoProgress progress;
  for (;;) {
    std::byte* buf = internal::NextBuffer(request, progress);
    size_t len = std::min(internal::Remaining(request, progress), kMaxCallBytes);
    auto off = static_cast<off_t>(internal::NextOffset(request, progress));
    ssize_t n = request.op == IoOp::kRead ? ::pread(request.fd, buf, len, off)
                                          : ::pwrite(request.fd, buf, len, off);
    int64_t result = n >= 0 ? n : -errno;
    result = internal::FilterResult(filter_.get(), request, result);
    if (internal::ApplyResult(request, progress, result, kEngine)) return;
  }
}

}  // namespace kvtier::tiers::nvme
