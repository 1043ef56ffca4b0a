// MoveRequests: what request threads ask of the background mover when StoreOptions::
// background_disk_moves keeps disk I/O off them: room in the host tier for a put, blocks below
// the host tier brought up for a reader, and just-committed blocks written through to NVMe (and to
// the remote tier). The
// store fills it; the TierMover (daemon/mover/) drains it.
//
// A fetch is asked for once however many readers wait for it (they call the store again when the
// mover says it moved something: SetMoveListener, NotifyMoved, or after a short pause). A fetch the
// mover could not do (no room, a device error) is remembered, so that the next read of that block
// is a miss instead of asking again forever; the memory of failures is bounded, and a failure
// older than any reader's wait counts for nothing.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/keys.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace kvtier::store {

// A committed block to be written through to NVMe: its key, and the generation (the id of the
// reservation it was committed from) that tells it from a later block under the same key.
struct WriteThroughRequest {
  BlockKey key;
  uint64_t generation = 0;
};

class MoveRequests {
 public:
  // A put found no room for a block of `bytes` without a disk write.
  void AskForRoom(uint64_t bytes);
  // The largest block size asked for since the last call, and forgets it; 0 when none.
  uint64_t TakeRoomRequest();

  // A reader wants `key` brought up. false when it is already asked for, or being fetched.
  bool AskForFetch(const BlockKey& key);
  // Up to `max` fetches asked for, oldest first, taken out of the queue. The caller calls
  // FinishFetch for each when it is done: until then the key counts as asked for, so that a
  // reader polling meanwhile does not queue a second fetch, which would find the block pinned by
  // the first and fail.
  std::vector<BlockKey> TakeFetches(size_t max);
  // Whether a fetch from NVMe is asked for and not taken yet.
  bool HasFetches() const;
  // The same for a block that no local tier holds, to be fetched from the remote tier into host
  // memory: the namespace comes with it (the remote key and the block's size depend on it).
  // Fetches of both kinds share the "asked for" and "failed" memories (FinishFetch,
  // TakeFailedFetch). At most kMaxRemoteFetches wait: past that (the remote tier answers slower
  // than readers ask) a read is a miss instead of one more request behind those its readers may
  // have given up on.
  enum class RemoteAsk : uint8_t { kQueued, kAlreadyAsked, kQueueFull };
  RemoteAsk AskForRemoteFetch(const NamespaceId& ns, const BlockKey& key);
  // Up to `max` of them, oldest first, taken out of the queue. Those asked for before
  // `asked_since` are dropped instead (counted in *expired): their readers have stopped waiting
  // (a reader waits up to limits.mover_wait_ms), and fetching them would only delay the fetches
  // readers still wait for. A reader that still wants one asks again.
  std::vector<std::pair<NamespaceId, BlockKey>> TakeRemoteFetches(
      size_t max, std::chrono::steady_clock::time_point asked_since, uint64_t* expired = nullptr);
  // The fetch of `key` ended; `moved` false: the mover could not bring it up.
  void FinishFetch(const BlockKey& key, bool moved);
  // Whether a fetch of `key` failed at or after `failed_since`; forgets the failure either way. A
  // reader waits for its fetch at most StoreOptions::reader_wait, so a caller passes
  // that long ago: an older failure answered nobody who waits now (a prefetch's, which its
  // reader never reached), and the block may be readable again (put since, then demoted).
  bool TakeFailedFetch(const BlockKey& key, std::chrono::steady_clock::time_point failed_since);

  // A block committed from reservation `generation` waits for its write-through copy on NVMe,
  // queued for the mover.
  void AskForWriteThrough(const BlockKey& key, uint64_t generation);
  // The same for a copy the committing thread makes itself: tracked, not queued.
  void TrackWriteThrough(uint64_t generation);
  // Up to `max` write-throughs asked for, oldest first, taken out of the queue. They stay pending
  // until FinishWriteThrough.
  std::vector<WriteThroughRequest> TakeWriteThroughs(size_t max);
  // The copy of `generation` ended: OK when it is on NVMe or no longer needed (the block was
  // replaced or removed first), the reason otherwise. A failure is kept for the waiter to take
  // (TakeWriteThroughOutcome), unless it gave up (ForgetWriteThrough); at most
  // kMaxRememberedWriteThroughFailures are kept, oldest forgotten first, so that failures nobody
  // waits for cannot grow without bound.
  void FinishWriteThrough(uint64_t generation, Status outcome);
  // Whether the write-through of `generation` is queued or being written.
  bool WriteThroughPending(uint64_t generation) const;
  // Whether anything is known of the write-through of `generation`: pending, or failed and not
  // taken yet. What a waiter checks once, right after the commit.
  bool WriteThroughTracked(uint64_t generation) const;
  // nullopt while the copy of `generation` is pending; then its outcome, once (a failure is
  // forgotten when taken). OK as well for a generation never tracked or already taken.
  std::optional<Status> TakeWriteThroughOutcome(uint64_t generation);
  // The waiter stopped waiting: the outcome of `generation` is not kept for it.
  void ForgetWriteThrough(uint64_t generation);

  // A committed block to be copied to the remote tier as well (remote write-through). Nobody
  // waits for it: the copy is best effort. false when kMaxRemoteWriteThroughs are queued already
  // (the remote tier is slower than the puts): this one is not made.
  bool AskForRemoteWriteThrough(const BlockKey& key, uint64_t generation);
  // Up to `max` of them, oldest first, taken out of the queue.
  std::vector<WriteThroughRequest> TakeRemoteWriteThroughs(size_t max);

  bool HasWork() const;

  // Who is told when the mover has moved something (a fetch ended, room was made), so that
  // requests waiting for it call the store again at once. Called on the mover's threads with no
  // lock held; it must not block. An empty function removes it.
  void SetMoveListener(std::function<void()> listener);
  void NotifyMoved();

 private:
  // Past this many failures nobody came back for, the oldest memory is dropped: the cost is one
  // more fetch attempt for those blocks.
  static constexpr size_t kMaxRememberedFailures = 4096;
  // A waiter takes its failure within limits.mover_wait_ms of its commit; only failures nobody
  // waits for (commits outside the server's handlers) reach this many.
  static constexpr size_t kMaxRememberedWriteThroughFailures = 65536;
  // 24 bytes each: at most 1.5 MiB of requests waiting for the network.
  static constexpr size_t kMaxRemoteWriteThroughs = 65536;
  // 64 readers' prefetches (Store::kMaxRemotePrefetch keys each).
  static constexpr size_t kMaxRemoteFetches = 4096;

  mutable Mutex mu_;
  uint64_t room_bytes_ GUARDED_BY(mu_) = 0;
  std::deque<BlockKey> fetches_ GUARDED_BY(mu_);
  struct RemoteFetch {
    NamespaceId ns;
    BlockKey key;
    std::chrono::steady_clock::time_point asked_at;
  };
  std::deque<RemoteFetch> remote_fetches_ GUARDED_BY(mu_);
  std::unordered_set<BlockKey, Key128Hash> queued_ GUARDED_BY(mu_);  // queued or being fetched
  // When each remembered fetch failed.
  std::unordered_map<BlockKey, std::chrono::steady_clock::time_point, Key128Hash> failed_
      GUARDED_BY(mu_);
  std::deque<WriteThroughRequest> write_throughs_ GUARDED_BY(mu_);
  std::unordered_set<uint64_t> pending_write_throughs_ GUARDED_BY(mu_);    // queued or writing
  std::unordered_set<uint64_t> abandoned_write_throughs_ GUARDED_BY(mu_);  // pending, nobody waits
  std::unordered_map<uint64_t, Status> failed_write_throughs_ GUARDED_BY(mu_);
  std::deque<uint64_t> failed_write_through_order_ GUARDED_BY(mu_);  // oldest first
  std::deque<WriteThroughRequest> remote_write_throughs_ GUARDED_BY(mu_);
  mutable Mutex listener_mu_;
  std::shared_ptr<const std::function<void()>> listener_ GUARDED_BY(listener_mu_);
};

}  // namespace kvtier::store
