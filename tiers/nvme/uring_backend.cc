#include "tiers/nvme/uring_backend.h"

#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "tiers/nvme/io_retry.h"

namespace kvtier::tiers::nvme {
namespace {

constexpr uint64_t kMaxFixedChunkBytes = uint64_t{1} << 30;  // kernel limit per fixed buffer
constexpr uint64_t kMaxSqeBytes = uint64_t{1} << 30;  // an sqe length is 32-bit; stay well below
constexpr std::string_view kEngine = "io_uring";
// The user data of an entry withdrawn after a refused submission: no request's index.
constexpr uint64_t kWithdrawnTag = ~uint64_t{0};

}  // namespace

// One ring and the lock that gives it to one submitting thread at a time.
class UringBackend::Ring {
 public:
  Ring() = default;
  ~Ring() {
    if (initialised_) io_uring_queue_exit(&ring_);
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Returns 0 or -errno.
  int Init(uint32_t entries) {
    int rc = io_uring_queue_init(entries, &ring_, 0);
    initialised_ = rc == 0;
    return rc;
  }

  io_uring* get() { return &ring_; }
  std::mutex& mu() { return mu_; }

 private:
  io_uring ring_{};
  bool initialised_ = false;
  std::mutex mu_;  // held by the thread driving this ring for a whole batch
};

Result<std::unique_ptr<IoBackend>> UringBackend::Create(const IoBackendConfig& config, int* err) {
  std::vector<std::unique_ptr<Ring>> rings;
  for (uint32_t i = 0; i < config.ring_count; ++i) {
    auto ring = std::make_unique<Ring>();
    int rc = ring->Init(config.queue_depth);
    if (rc < 0) {
      *err = -rc;
      return ErrnoStatus(-rc, "io_uring_queue_init(" + std::to_string(config.queue_depth) + ")");
    }
    rings.push_back(std::move(ring));
  }
  *err = 0;
  return std::unique_ptr<IoBackend>(new UringBackend(config, std::move(rings)));
}

UringBackend::UringBackend(const IoBackendConfig& config, std::vector<std::unique_ptr<Ring>> rings)
    : queue_depth_(config.queue_depth), filter_(config.fault_filter), rings_(std::move(rings)) {}

UringBackend::~UringBackend() = default;

Status UringBackend::RegisterRegion(std::byte* base, uint64_t bytes) {
  if (base == nullptr || bytes == 0) return InvalidArgument("empty io region");
  if (!chunks_.empty()) return InvalidArgument("an io region is already registered");
  std::vector<iovec> iovecs;
  for (uint64_t off = 0; off < bytes; off += kMaxFixedChunkBytes) {
    iovecs.push_back({base + off, std::min(kMaxFixedChunkBytes, bytes - off)});
  }
  for (size_t i = 0; i < rings_.size(); ++i) {
    int rc = io_uring_register_buffers(rings_[i]->get(), iovecs.data(),
                                       static_cast<unsigned>(iovecs.size()));
    if (rc < 0) {
      for (size_t j = 0; j < i; ++j) io_uring_unregister_buffers(rings_[j]->get());
      Status st = ErrnoStatus(-rc, "io_uring_register_buffers of " + std::to_string(bytes) +
                                       " bytes");
      return rc == -ENOMEM ? Busy(st.message()) : st;
    }
  }
  for (const iovec& v : iovecs) chunks_.push_back({static_cast<std::byte*>(v.iov_base), v.iov_len});
  return Status::Ok();
}

int UringBackend::FixedIndex(const std::byte* buffer, uint64_t length) const {
  if (chunks_.empty() || buffer < chunks_.front().base) return -1;
  uint64_t off = static_cast<uint64_t>(buffer - chunks_.front().base);
  uint64_t index = off / kMaxFixedChunkBytes;
  if (index >= chunks_.size()) return -1;
  const Chunk& c = chunks_[index];
  uint64_t in_chunk = off - index * kMaxFixedChunkBytes;
  if (in_chunk + length > c.bytes) return -1;  // straddles two chunks: ordinary path
  return static_cast<int>(index);
}

UringBackend::Ring& UringBackend::AcquireRing() {
  size_t start = std::hash<std::thread::id>{}(std::this_thread::get_id()) % rings_.size();
  for (size_t i = 0; i < rings_.size(); ++i) {
    Ring& ring = *rings_[(start + i) % rings_.size()];
    if (ring.mu().try_lock()) return ring;
  }
  Ring& ring = *rings_[start];
  ring.mu().lock();
  return ring;
}

void UringBackend::Submit(std::span<IoRequest> requests) {
  if (requests.empty()) return;
  Ring& ring = AcquireRing();
  std::lock_guard<std::mutex> hold(ring.mu(), std::adopt_lock);
  RunBatch(ring, requests);
}

namespace {

// Fills one sqe for the next piece of `r`, with the fixed-buffer opcode when `fixed` >= 0.
void Prepare(io_uring_sqe* sqe, const IoRequest& r, const internal::IoProgress& p, int fixed,
             uint64_t tag) {
  std::byte* buf = internal::NextBuffer(r, p);
  auto len = static_cast<unsigned>(std::min(internal::Remaining(r, p), kMaxSqeBytes));
  uint64_t off = internal::NextOffset(r, p);
  if (r.op == IoOp::kRead) {
    if (fixed >= 0) io_uring_prep_read_fixed(sqe, r.fd, buf, len, off, fixed);
    else io_uring_prep_read(sqe, r.fd, buf, len, off);
  } else {
    if (fixed >= 0) io_uring_prep_write_fixed(sqe, r.fd, buf, len, off, fixed);
    else io_uring_prep_write(sqe, r.fd, buf, len, off);
  }
  io_uring_sqe_set_data64(sqe, tag);
}

void FailUnfinished(std::span<IoRequest> requests, std::span<internal::IoProgress> progress,
                    int rc) {
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!progress[i].finished) requests[i].status = TranslateIoError(-rc, requests[i], kEngine);
  }
}

}  // namespace

// The state of one Submit on one ring. The vectors are thread-local, so a batch allocates nothing
// once its thread is warm.
struct UringBackend::BatchState {
  std::span<IoRequest> requests;
  std::vector<internal::IoProgress>& progress;
  std::vector<uint32_t>& pending;  // pieces waiting to be (re)submitted
  size_t finished = 0;
  uint32_t in_ring = 0;
  bool broken = false;  // the ring refused a submission: reap only
};

// Keeps up to queue_depth pieces in flight until every request has finished.
void UringBackend::RunBatch(Ring& ring, std::span<IoRequest> requests) {
  thread_local std::vector<internal::IoProgress> progress;
  thread_local std::vector<uint32_t> pending;
  progress.assign(requests.size(), {});
  pending.clear();
  for (uint32_t i = requests.size(); i-- > 0;) pending.push_back(i);
  BatchState b{requests, progress, pending};
  io_uring* r = ring.get();
  while (b.finished < requests.size()) {
    if (!b.broken) FillRing(r, b);
    io_uring_cqe* cqe = nullptr;
    int rc;
    if (b.broken) {
      rc = io_uring_wait_cqe(r, &cqe);
    } else {
      const int refused = filter_ ? filter_->RefuseSubmit() : 0;
      rc = refused < 0 ? refused : io_uring_submit_and_wait(r, 1);
    }
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      if (b.broken) {  // cannot even reap: fail what is left rather than wait for ever
        FailUnfinished(requests, progress, rc);
        return;
      }
      // The ring refused a submission: send nothing more on it, fail what was not sent (the
      // pieces still pending and those the kernel did not take from the ring), and still reap
      // what it did take.
      b.broken = true;
      WithdrawUnsubmitted(r, b, rc);
      for (uint32_t i : pending) {
        requests[i].status = TranslateIoError(-rc, requests[i], kEngine);
        progress[i].finished = true;
      }
      b.finished += pending.size();
      pending.clear();
      if (b.in_ring == 0) return;
    }
    Reap(r, b);
  }
}

// The entries prepared but not consumed by the kernel stay in the submission queue, and the next
// submission on this ring (another batch's) would send them: a write of a buffer its owner has
// since freed or reused, to an extent that may now be another block's. Each one becomes a no-op
// whose completion is ignored, and its piece goes back to pending (failed by the caller), so that
// the batch does not wait for a completion that never comes.
void UringBackend::WithdrawUnsubmitted(io_uring* r, BatchState& b, int rc) {
  const unsigned unsubmitted = io_uring_sq_ready(r);
  const unsigned mask = r->sq.ring_mask;
  for (unsigned k = 0; k < unsubmitted; ++k) {
    io_uring_sqe* sqe = &r->sq.sqes[(r->sq.sqe_tail - unsubmitted + k) & mask];
    const auto i = static_cast<uint32_t>(sqe->user_data);
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, kWithdrawnTag);
    b.pending.push_back(i);
    --b.in_ring;
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (unsubmitted > 0) {
    spdlog::warn("io_uring refused a submission ({}): {} requests failed, the ring goes on",
                 std::strerror(-rc), unsubmitted);
  }
}

// Moves pending pieces into submission entries, up to the queue depth.
void UringBackend::FillRing(io_uring* r, BatchState& b) {
  while (!b.pending.empty() && b.in_ring < queue_depth_) {
    io_uring_sqe* sqe = io_uring_get_sqe(r);
    if (sqe == nullptr) return;
    uint32_t i = b.pending.back();
    b.pending.pop_back();
    const IoRequest& req = b.requests[i];
    int fixed = FixedIndex(internal::NextBuffer(req, b.progress[i]),
                           std::min(internal::Remaining(req, b.progress[i]), kMaxSqeBytes));
    if (fixed >= 0) fixed_requests_.fetch_add(1, std::memory_order_relaxed);
    Prepare(sqe, req, b.progress[i], fixed, i);
    ++b.in_ring;
    in_flight_.fetch_add(1, std::memory_order_relaxed);
  }
}

// Applies every completion available now; unfinished pieces go back to pending.
void UringBackend::Reap(io_uring* r, BatchState& b) {
  io_uring_cqe* cqe = nullptr;
  while (b.in_ring > 0 && io_uring_peek_cqe(r, &cqe) == 0) {
    if (io_uring_cqe_get_data64(cqe) == kWithdrawnTag) {  // an earlier batch's refused entry
      io_uring_cqe_seen(r, cqe);
      continue;
    }
    auto i = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
    int64_t res = internal::FilterResult(filter_.get(), b.requests[i], cqe->res);
    io_uring_cqe_seen(r, cqe);
    --b.in_ring;
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    if (internal::ApplyResult(b.requests[i], b.progress[i], res, kEngine)) ++b.finished;
    else b.pending.push_back(i);
  }
}

Status UringBackend::Sync(int fd) { return internal::SyncFd(fd, kEngine); }

}  // namespace kvtier::tiers::nvme
