// TierMover: the threads that move blocks between tiers in the background, so that no network
// thread waits for a disk or a device copy.
//
// What it does, in this order on every wake-up:
//   1. blocks readers asked for (Store::TakeFetchRequests): read up from NVMe into the host tier,
//      and blocks no local tier holds (Store::TakeRemoteFetchRequests): fetched from the remote
//      tier into it;
//   2. write-throughs of committed puts (Store::TakeWriteThroughRequests), whose
//      acknowledgements wait for them, as one batch;
//   3. room a put asked for (Store::TakeRoomRequest), then room ahead of demand: while the host
//      tier is fuller than the high watermark, its least recently used blocks are demoted to
//      NVMe until it is below the low one (without NVMe but with a remote tier, they are
//      published to the remote store and dropped: Store::EvictToTarget);
//   4. GPU promotion candidates, copied up into the GPU tier (thread 0 only; with a GPU tier);
//   5. remote write-throughs (Store::TakeRemoteWriteThroughRequests): committed blocks copied to
//      the remote tier, which nobody waits for (the last thread only);
//   6. with NVMe above a remote tier, room in NVMe: while it is fuller than the high watermark,
//      its least recently used blocks are published to the remote store and dropped until it is
//      below the low one (the last thread only). A demotion into a full NVMe tier makes the room
//      it needs the same way (Store::DemoteVictims): an allocation's own eviction would drop
//      blocks unpublished.
// It wakes when a request asks (Wake, which the store calls through SetMoverWakeup) and every
// tick otherwise. Several threads run the same loop. Each round moves up to `batch` blocks as
// one NVMe submission (Tier::WriteBlocks / ReadBlocks); the demotions of all the threads together
// keep about `write_depth_bytes` in flight: what reaches a device's write bandwidth (one block at
// a time does not), and no deeper, since reads queue behind the writes.
//
// Reads first: while a reader waits for NVMe blocks (a fetch asked for or being read), only one
// thread demotes, one block at a time; the others wait. A read queued behind a deep queue of
// writes waits for them: on the disk of bench/README.md a 256 KiB read takes 0.24 ms alone and
// 3.5 ms behind 16 writes in flight (fio), and the reader is a request waiting for its prefix,
// where a demotion only makes room ahead of demand. A put waiting for room still gets that one
// demotion at a time, so it is never starved.
//
// Ownership: borrows the store, which must outlive it. The destructor stops and joins every
// thread; a move in progress finishes first.
//
// Thread safety: Wake may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "daemon/store/store.h"

namespace kvtier::mover {

class TierMover {
 public:
  struct Options {
    size_t threads = 4;  // moves to and from NVMe in flight at once
    // The host tier is kept between these fractions of its capacity (with an NVMe tier below it).
    double high_watermark = 0.95;
    double low_watermark = 0.90;
    std::chrono::milliseconds tick{20};
    // Blocks one thread demotes or promotes as one batch before it looks at the requests again:
    // bounds how long a waiting reader or put is kept behind the watermark work.
    size_t batch = 8;
    // Bytes of watermark demotions in flight at once, shared by the threads: each batch takes at
    // most write_depth_bytes / threads (its first block always goes, so a thread has at least
    // one block in flight). Enough to reach the disk's write bandwidth and no more: a read waits
    // behind every write queued before it, and room for waiting puts arrives as each batch ends.
    // On the disk of bench/README.md (fio, O_DIRECT, io_uring) sequential 256 KiB writes reach
    // 2.7 GB/s at 1 MiB in flight and no more at 8 MiB, and 2 MiB writes 2.8 GB/s at one in
    // flight; 2 MiB here against the earlier 8 MiB a thread cut the NVMe reads' wait in
    // bench/replay_bench.sh by a third and halved spill_bench.sh's longest put stall. A deeper
    // device (several NVMe drives striped) may want more: placement.write_depth_bytes.
    uint64_t write_depth_bytes = 2 << 20;
    bool gpu_promotion = false;  // copy GPU promotion candidates up (a GPU tier is there)
    // Run the threads at the lowest CPU priority (nice 19). Their work is mostly waiting for a
    // disk, and the CPU it takes (checksums, catalog records) should go to whoever else wants
    // the CPU after them: the engine on the node, kvtierd's network threads. On 2 cores, in
    // bench/replay_bench.sh with the NVMe tier on tmpfs (no disk waits, only CPU; see
    // docs/design.md for the command), the drop-mode replay took 5.3-5.5 s with it and
    // 7.0-7.1 s without, the host tier alone 4.3 s.
    bool low_cpu_priority = true;
  };

  TierMover(store::Store& store, const Options& options);
  ~TierMover();
  TierMover(const TierMover&) = delete;
  TierMover& operator=(const TierMover&) = delete;

  // Wakes the threads now instead of at the next tick.
  void Wake();

 private:
  void Run(size_t index);
  // One round of work; true when it did something (the thread then goes round again at once).
  bool Round(size_t index);
  bool ServeFetches();
  bool ServeWriteThroughs();
  bool KeepHostRoom();
  bool KeepLastTierRoom();
  // The watermarks' hysteresis for a tier of stats `s`: past the high watermark `draining` is set,
  // at the low one cleared. The low watermark's bytes while draining; nullopt otherwise.
  std::optional<uint64_t> DrainTarget(const tiers::TierStats& s, std::atomic<bool>& draining) const;
  // Whether a reader waits for an NVMe block: a fetch asked for and not taken, or being read.
  bool ReadersWaiting() const;

  store::Store& store_;
  const Options options_;
  // Fixed before the threads start: a thread reads it while the constructor starts the others.
  const size_t thread_count_;
  std::atomic<size_t> reading_{0};  // threads taking or reading fetched blocks up from NVMe now
  // While a reader waits: a thread demotes one block at a time (the others hold back).
  std::atomic<bool> lone_demoter_{false};
  // A thread held its demotions back for a reader: the last read to end wakes the threads.
  std::atomic<bool> held_back_{false};
  // The host tier went past the high watermark and has not been brought down to the low one yet.
  std::atomic<bool> draining_{false};
  // The same for the NVMe tier above a remote tier (only the last thread uses it).
  std::atomic<bool> draining_last_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t wakeups_ = 0;              // guarded by mu_: bumped by Wake, so no wake-up is missed
  bool stop_ = false;                 // guarded by mu_
  std::vector<std::thread> threads_;  // last: started once everything above is set
};

}  // namespace kvtier::mover
