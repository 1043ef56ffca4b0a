#include "daemon/mover/tier_mover.h"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace kvtier::mover {
namespace {
constexpr int kLowCpuNice = 19;
}  // namespace

TierMover::TierMover(store::Store& store, const Options& options)
    : store_(store), options_(options), thread_count_(options.threads == 0 ? 1 : options.threads) {
  for (size_t i = 0; i < thread_count_; ++i) threads_.emplace_back([this, i] { Run(i); });
}

TierMover::~TierMover() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void TierMover::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++wakeups_;
  }
  cv_.notify_all();
}

void TierMover::Run(size_t index) {
  const std::string name = "kvtier-mover-" + std::to_string(index);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  // Linux applies a nice value per thread (PRIO_PROCESS with a thread id), and lowering one's
  // own priority needs no privilege.
  if (options_.low_cpu_priority && setpriority(PRIO_PROCESS, gettid(), kLowCpuNice) != 0) {
    spdlog::warn("{}: could not lower its CPU priority: {}", name, std::strerror(errno));
  }
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, options_.tick, [&] { return stop_ || wakeups_ != seen; });
      if (stop_) return;
      seen = wakeups_;
    }
    // Work until a round finds nothing to do: a burst of puts keeps the threads busy without a
    // tick between batches.
    while (Round(index)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
  }
}

bool TierMover::Round(size_t index) {
  // Readers and acknowledgements wait for the first two; the watermark work is ahead of demand.
  bool worked = ServeFetches();
  worked |= ServeWriteThroughs();
  worked |= KeepHostRoom();
  if (index == 0 && options_.gpu_promotion) {
    const size_t moved = store_.PromoteCandidates(options_.batch);
    if (moved > 0) spdlog::debug("mover: {} blocks promoted into the GPU tier", moved);
    worked |= moved > 0;
  }
  // Copies to the remote tier wait for the network and nobody waits for them: one thread only,
  // so that the others stay free for the fetches and NVMe copies that requests wait for.
  if (index + 1 == thread_count_) {
    const std::vector<store::WriteThroughRequest> remote =
        store_.TakeRemoteWriteThroughRequests(options_.batch);
    if (!remote.empty()) store_.WriteThroughToRemote(remote);
    worked |= !remote.empty();
    worked |= KeepLastTierRoom();
  }
  return worked;
}

bool TierMover::KeepLastTierRoom() {
  if (!store_.PublishesDropsOf(TierId::kNvme)) return false;
  const std::optional<uint64_t> low =
      DrainTarget(store_.tier(TierId::kNvme)->Stats(), draining_last_);
  if (!low) return false;
  return store_.EvictToTarget(TierId::kNvme, *low, options_.batch) > 0;
}

std::optional<uint64_t> TierMover::DrainTarget(const tiers::TierStats& s,
                                               std::atomic<bool>& draining) const {
  const auto cap = static_cast<double>(s.capacity_bytes);
  const auto low = static_cast<uint64_t>(cap * options_.low_watermark);
  if (s.used_bytes > static_cast<uint64_t>(cap * options_.high_watermark)) {
    draining.store(true, std::memory_order_relaxed);
  }
  if (s.used_bytes <= low) draining.store(false, std::memory_order_relaxed);
  if (!draining.load(std::memory_order_relaxed)) return std::nullopt;
  return low;
}

namespace {
// One 2 MiB block per batch; 128 blocks of 16 KiB (within `batch`).
constexpr uint64_t kRemoteFetchBatchBytes = 2 << 20;
}  // namespace

bool TierMover::ServeFetches() {
  // Taken together and read as one batch: a reader's prefix usually asks for many blocks at once
  // (Store::PrefetchForRead), and waits for the slowest of them. Counted as a reader before the
  // requests leave their queue: in between, a demoting thread would see neither and send a whole
  // batch of writes ahead of the read.
  std::vector<BlockKey> keys;
  if (store_.FetchRequestsWaiting()) {
    reading_.fetch_add(1);
    keys = store_.TakeFetchRequests(options_.batch);
    if (!keys.empty()) store_.Fetch(keys);
    // The last reader out lets the demotions held back for it go on now, not at the next tick.
    // Sequentially consistent, with the hold-back in KeepHostRoom: either this sees its flag or
    // that thread sees no reader.
    if (reading_.fetch_sub(1) == 1 && held_back_.exchange(false)) Wake();
  }
  // Blocks no local tier holds, from the remote tier: one GET batch, also up to `batch`, and up
  // to kRemoteFetchBatchBytes: the fetches of large blocks go over several threads, each stored
  // (and its reader served) as it arrives, while the next ones are still on the network.
  const std::vector<std::pair<NamespaceId, BlockKey>> remote =
      store_.TakeRemoteFetchRequests(options_.batch, kRemoteFetchBatchBytes);
  if (!remote.empty()) store_.FetchRemote(remote);
  return !keys.empty() || !remote.empty();
}

bool TierMover::ServeWriteThroughs() {
  const std::vector<store::WriteThroughRequest> requests =
      store_.TakeWriteThroughRequests(options_.batch);
  if (!requests.empty()) store_.WriteThrough(requests);
  return !requests.empty();
}

bool TierMover::ReadersWaiting() const {
  return reading_.load() > 0 || store_.FetchRequestsWaiting();
}

bool TierMover::KeepHostRoom() {
  tiers::Tier* host = store_.tier(TierId::kHost);
  if (host == nullptr || !store_.HostHasTierBelow()) return false;
  // Reads first (see the header): while a reader waits, one demoting thread (whichever takes the
  // flag first), one block a batch; the others wait for the last read to end.
  const bool reading = ReadersWaiting();
  bool lone = false;
  if (reading) {
    bool taken = false;
    lone = lone_demoter_.compare_exchange_strong(taken, true);
    if (!lone) {
      held_back_.store(true);
      // Read again: a read that ended between the two looks found no flag to wake anyone by.
      if (ReadersWaiting()) return false;
    }
  }
  struct Leave {
    std::atomic<bool>& flag;
    bool lone;
    ~Leave() {
      if (lone) flag.store(false);
    }
  } leave{lone_demoter_, lone};
  const size_t batch = reading ? 1 : options_.batch;
  bool worked = false;
  if (const uint64_t bytes = store_.TakeRoomRequest(); bytes != 0) {
    if (!store_.MakeRoom(bytes)) {
      spdlog::debug("mover: no room for a block of {} bytes (everything leased or pinned)", bytes);
    }
    worked = true;
  }
  // Past the high watermark the tier is brought down to the low one, over as many rounds as that
  // takes (one block a round while a reader waits).
  const std::optional<uint64_t> low = DrainTarget(host->Stats(), draining_);
  if (!low) return worked;
  // Each thread demotes a batch of its own, up to its share of the write depth: the threads
  // together keep about write_depth_bytes of NVMe writes in flight. A thread that found nothing to
  // evict (all leased or pinned) reports no work, so the loop waits for the next tick instead of
  // spinning.
  return store_.EvictToTarget(TierId::kHost, *low, batch,
                              options_.write_depth_bytes / thread_count_) > 0 ||
         worked;
}

}  // namespace kvtier::mover
