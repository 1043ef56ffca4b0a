// Store: the in-process cache engine. Two-phase puts, leased reads, lookups and eviction over an
// ordered list of tiers (hottest first: [gpu,] host[, nvme]), with the statistics operators read.
//
// Ownership: the store owns the BlockIndex and the lease and reservation tables; it borrows the
// tiers (the daemon owns them and must outlive the store) and the clock.
//
// Guarantees:
// - Two-phase put: BeginPut reserves an extent and a kWriting entry that no reader can see; the
//   writer fills the bytes; CommitPut publishes the block, AbortPut (or the reservation timing out)
//   gives everything back. Nobody ever reads half a block.
// - A lease pins a block: it is not evicted, moved or freed until Release or until the lease times
//   out, so a reader can copy straight out of the tier's memory.
// - Puts land in the host tier (the first tier when there is none), never in the GPU tier: a
//   block earns its place on the device by being read (GpuPromotionPolicy). A read only records
//   the block as a candidate; PromoteCandidates, called by the daemon's GPU mover thread, copies
//   candidates up. Tiers are exclusive: a block lives in one tier at a time, plus a shadow
//   on NVMe for a memory block with a copy there (write-through, or a block read up from NVMe
//   that kept its copy: StoreOptions::nvme_copy_share), which its eviction moves into.
// - When a tier is full, its policy's victim (ready, unleased, unpinned) is demoted to the next
//   tier or, from the last tier, dropped. When nothing can go, the put fails with kBusy and reads
//   keep working.
// - Accounting: committed puts + adopted blocks = blocks present + blocks dropped by eviction +
//   blocks removed (corrupt blocks dropped count as removed).
//
// Thread safety: every method may be called from any thread. No lock is held while block bytes
// are copied, by the caller or by the store (which copies only when it moves a block between
// tiers: demotion, promotion, write-through).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/keys.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/index/block_index.h"
#include "daemon/placement/admission_policy.h"
#include "daemon/placement/gpu_promotion_policy.h"
#include "daemon/placement/promotion_queue.h"
#include "daemon/store/departure_log.h"
#include "daemon/store/lease_table.h"
#include "daemon/store/move_requests.h"
#include "daemon/store/move_stats.h"
#include "daemon/store/namespace_registry.h"
#include "daemon/store/quota_table.h"
#include "daemon/store/read_failures.h"
#include "daemon/store/reservation_table.h"
#include "daemon/store/store_options.h"
#include "daemon/store/store_stats.h"
#include "tiers/tier.h"

namespace kvtier::store {

// A reserved slot for a block being written.
struct Reservation {
  uint64_t id = 0;
  BlockKey key;
  TierId tier = TierId::kHost;
  Extent extent;
  std::byte* address = nullptr;  // where to write, for memory tiers; nullptr otherwise
};

// The size of one ready block and where it is (Store::SizeOf).
struct StoredSize {
  uint64_t bytes = 0;  // the block as put
  TierId tier = TierId::kHost;
};

// What the store can say of one block of a namespace, for KVT.EXPLAIN (Store::Explain).
struct BlockExplanation {
  enum class State : uint8_t {
    kPresent,  // ready in `tier`
    kWriting,  // a put of it is in flight: not visible yet
    kAbsent,   // not here; `departure` says why when the log remembers
  };
  State state = State::kAbsent;
  TierId tier = TierId::kHost;
  std::optional<Departure> departure;
  uint64_t departed_age_us = 0;  // how long ago it departed, with `departure`
};

// A read pin on a ready block.
struct Lease {
  uint64_t id = 0;
  BlockKey key;
  TierId tier = TierId::kHost;
  Extent extent;
  std::byte* address = nullptr;  // where to read from, for memory tiers; nullptr otherwise
  uint64_t checksum = 0;
  bool has_checksum = false;
  uint64_t deadline_us = 0;
};

class Store {
 public:
  // `tiers` hottest first, at least one, no two with the same id, a GPU tier only first and
  // followed by the host tier; none owned. kInvalidArgument otherwise, and for bad policy options.
  static Result<std::unique_ptr<Store>> Create(const StoreOptions& options,
                                               std::vector<tiers::Tier*> tiers, Clock& clock);
  ~Store();

  // Idempotent for identical info. kInvalidArgument when the id is known with other parameters.
  // Its blocks count in the quota group its tenant or its id has (SetQuota), if any.
  Status RegisterNamespace(const NamespaceInfo& info);

  // Sets `who`'s byte quota in tier `tier` (0 clears it): within its quota a tenant's (or a
  // namespace's) blocks are not evicted to make room for anyone else's; over it, its own blocks
  // are evicted first (BlockIndex). Applies at once to the namespaces registered now and later,
  // and to their blocks already stored. kNotFound when the store has no such tier; kRejected
  // past the number of quota groups.
  Status SetQuota(const QuotaSubject& who, TierId tier, uint64_t bytes);
  struct QuotaReport {
    QuotaSubject subject;
    std::array<uint64_t, kTierCount> quota_bytes{};
    std::array<uint64_t, kTierCount> used_bytes{};
  };
  std::vector<QuotaReport> Quotas() const;
  std::optional<NamespaceInfo> GetNamespace(const NamespaceId& ns) const;
  std::vector<NamespaceInfo> Namespaces() const;

  // Reserves room for `key` in the host tier, evicting or demoting under pressure. Errors:
  // kNotFound (namespace not registered), kInvalidArgument (size differs from the namespace's
  // block size, or 0), kAlreadyExists (the block is stored: skip the copy), kBusy (another client
  // is writing it, or no room can be made now: retry later), kRejected (larger than the tier, or
  // the key is held by another namespace), kPending (background_disk_moves: the tier is full and
  // the mover was asked for room; call again shortly).
  Result<Reservation> BeginPut(const NamespaceId& ns, const BlockKey& key, uint64_t bytes);

  // Publishes a reserved block. `checksum` (XXH3-64 of the payload) is stored with it when given.
  // kNotFound when the reservation is unknown (never made, already finished or timed out).
  Status CommitPut(uint64_t reservation_id, std::optional<uint64_t> checksum = std::nullopt);

  // Publishes a reserved block under `key` instead of the key it was reserved for, which the
  // caller chose as a placeholder (a value received into a slot before the command that names
  // its key could run). Errors: kNotFound (reservation unknown or timed out: it is gone);
  // kAlreadyExists or kRejected when `key` holds a block (the reservation stays: remove that
  // block and call again, or AbortPut); kBusy when another writer took `key` meanwhile (the
  // reservation is gone then).
  Status CommitPutAs(uint64_t reservation_id, const BlockKey& key,
                     std::optional<uint64_t> checksum = std::nullopt);

  // Moves an open reservation's deadline to now + reservation_timeout, for a writer that fills
  // its slot over a long time (the server receiving a large value from a slow client): it renews
  // before each piece. false when the reservation is not open any more (committed, aborted or
  // timed out): then nothing more may be written into its slot.
  bool RenewReservation(uint64_t reservation_id);

  // Gives a reservation back. kNotFound when unknown.
  Status AbortPut(uint64_t reservation_id);
  // Gives back a reservation whose writer may still be copying into the slot from another process
  // (its connection closed under it, the daemon's idle timeout say): the block leaves the index
  // now, as at AbortPut, but the slot stays quarantined like a timed-out reservation's (see
  // ExpireDeadlines), so that a late write lands on space nobody else was given. kNotFound when
  // unknown; a reservation already quarantined stays as it is.
  Status AbandonPut(uint64_t reservation_id);

  // Copy-in convenience: BeginPut, write `bytes` through the tier, CommitPut. `reservation_id`,
  // when given, receives the reservation's id (for WriteThroughPending).
  Status Put(const NamespaceId& ns, const BlockKey& key, std::span<const std::byte> bytes,
             uint64_t* reservation_id = nullptr);

  // Whether the block committed from reservation `reservation_id` still waits for its
  // write-through copy on NVMe (nvme_write_through with background_disk_moves: the mover writes
  // it). A put is acknowledged as durable once this is false.
  bool WriteThroughPending(uint64_t reservation_id) const {
    return move_requests_.WriteThroughPending(reservation_id);
  }
  // For the acknowledgement of a put under nvme_write_through: whether its copy is tracked (asked
  // right after the commit; false when no copy is made, as for a put that did not land in the
  // host tier), then its outcome once it is known (nullopt while pending), taken once:
  //   OK            the copy is on NVMe (or no longer needed: the block was replaced or removed);
  //   anything else the block is in memory only, and the status says why (no room on NVMe, a
  //                 device or catalog error).
  // A waiter that gives up calls ForgetWriteThrough. MoveRequests keeps the failures.
  bool WriteThroughTracked(uint64_t reservation_id) const {
    return move_requests_.WriteThroughTracked(reservation_id);
  }
  std::optional<Status> TakeWriteThroughOutcome(uint64_t reservation_id) {
    return move_requests_.TakeWriteThroughOutcome(reservation_id);
  }
  void ForgetWriteThrough(uint64_t reservation_id) {
    move_requests_.ForgetWriteThrough(reservation_id);
  }
  // The same for a waiter whose wait ran out (counted as write_through_timeouts).
  void WriteThroughTimedOut(uint64_t reservation_id) {
    counters_.write_through_timeouts.fetch_add(1);
    move_requests_.ForgetWriteThrough(reservation_id);
  }

  // Whose read a lease serves, for the GPU promotion policy. A block in the GPU pool gains only a
  // reader that copies it out of the pool device to device (kGpuPool: a client that attached the
  // pool); any other reader (kHostMemory) would get it through a device-to-host copy, slower than
  // out of the host arena, so its reads never make a block a promotion candidate.
  enum class Reader : uint8_t { kGpuPool, kHostMemory };

  // Leases a ready block of namespace `ns`. kNotFound on a miss (absent, being written, or of
  // another namespace); kBusy when max_leases are open; kPending (background_disk_moves) when the
  // block lies on NVMe and the mover was asked to bring it up: call again shortly (if the mover
  // cannot, the next call answers kNotFound: a miss, never a disk read on the caller's thread;
  // the call after that asks the mover again). A block in the GPU tier is leased with
  // address nullptr (read it with ReadLeased); a host block that the GPU promotion policy picks,
  // counting kGpuPool reads only, becomes a promotion candidate (nothing is copied here).
  Result<Lease> Acquire(const NamespaceId& ns, const BlockKey& key,
                        Reader reader = Reader::kGpuPool);

  // Ends a lease. kNotFound when unknown (already released or timed out).
  Status Release(uint64_t lease_id);

  // Moves a lease's deadline to now + lease_timeout, for a holder that is still copying (the
  // server writing a large value to a slow socket). kNotFound when the lease already ended or
  // timed out: its slot may have been reused, so what was read under it since the last renewal
  // must not be trusted.
  Status Renew(uint64_t lease_id);

  // Reads a leased block that is not in memory (lease.address == nullptr) into `dst` (at most the
  // block's size), through the tier's ReadBlock, which verifies what a device returns.
  // kChecksumMismatch: the stored bytes are not the block's; the block is dropped when this lease
  // ends, and the caller reports a miss. kDeviceError: the read failed; the block stays.
  Status ReadLeased(const Lease& lease, std::span<std::byte> dst);

  // Copy-out convenience: Acquire, read into `out` (resized to the block), Release.
  Status Get(const NamespaceId& ns, const BlockKey& key, std::vector<std::byte>& out);

  // The longest ready prefix of `keys` in namespace `ns` and the tier of each of its blocks;
  // touches that prefix (tail first) and counts the lookup in the namespace's statistics, unless
  // `count_later` (a lookup that may go on in the remote tier: its caller counts it with
  // CountLookup once it ends, so that its blocks, hits and misses are counted together). An
  // unregistered namespace is a miss, not an error.
  index::LookupResult Lookup(const NamespaceId& ns, std::span<const BlockKey> keys,
                             bool count_later = false);
  // Counts a lookup of `asked` keys whose local prefix was `local` and which found `remote_found`
  // more blocks in the remote tier.
  void CountLookup(const NamespaceId& ns, size_t asked, const index::LookupResult& local,
                   size_t remote_found);
  // Puts the ready prefix of `keys` in `ns` back in the order Lookup leaves it (head most recent),
  // without counting a lookup, a read or a use (BlockIndex::Refresh): for a client that put a
  // request's new blocks after looking the request up. Returns the prefix's length; 0 for an
  // unregistered namespace.
  size_t Refresh(const NamespaceId& ns, std::span<const BlockKey> keys);

  // Removes a ready block. kNotFound when absent; kBusy while it is leased (retry after release).
  Status Remove(const NamespaceId& ns, const BlockKey& key);

  // Keeps a ready block from eviction until now + ttl_us (0 unpins). kNotFound when absent.
  Status Pin(const NamespaceId& ns, const BlockKey& key, uint64_t ttl_us);
  // Keeps the ready blocks among `keys` from eviction for at least ttl_us more (a pin that lasts
  // longer is left alone): a lookup's hold on the prefix it found, until the engine loads it.
  void Hold(const NamespaceId& ns, std::span<const BlockKey> keys, uint64_t ttl_us);

  // Removes every ready, unleased block of `ns`; the namespace stays. Returns the blocks removed
  // and those left because a reader leases them (remove them again once it has released them).
  // Walks the whole index: for a FLUSHDB, not for a request path.
  struct RemoveAllResult {
    uint64_t removed = 0;
    uint64_t leased = 0;
  };
  RemoveAllResult RemoveAll(const NamespaceId& ns);

  // Removes every unleased block of `ns` and forgets the namespace; blocks still leased go when
  // their lease ends, reservations in flight are aborted at commit. Returns the blocks removed now.
  Result<uint64_t> DropNamespace(const NamespaceId& ns);

  // Takes back leases and aborts reservations whose deadline has passed. Returns how many. A
  // timed-out reservation's block disappears at once, but its space is only reused after the
  // writer finishes with CommitPut/AbortPut (which then answer kNotFound / OK) or after
  // kQuarantineFactor more timeouts: a late writer never overwrites another block. The daemon
  // calls this periodically; tests call it after moving a FakeClock.
  size_t ExpireDeadlines();

  // Evicts least-recently-used blocks of `tier` (demoting them, or dropping them from the last
  // tier) until its used bytes are at most `target_used_bytes`, trying at most `max_victims`
  // victims of at most `max_bytes` together (at least one). Returns the victims tried. For the
  // background mover, which keeps room free so that a put rarely waits for a demotion to disk.
  size_t EvictToTarget(TierId tier, uint64_t target_used_bytes, size_t max_victims,
                       uint64_t max_bytes = UINT64_MAX);

  // Whether `tier` is the last local tier, with a remote tier below it that its drops are
  // published to: the mover then keeps room in it with EvictToTarget, which publishes (an
  // allocation's own eviction drops unpublished).
  bool PublishesDropsOf(TierId tier) const;

  // Moves up to `max_blocks` promotion candidates from the host tier into the GPU tier, making
  // room there by demoting its least recently used blocks to host. For the GPU mover thread only:
  // it copies bytes and waits for the device. A candidate that is leased now goes back into the
  // queue for the next call (a few times, then it is skipped). One removed, replaced or moved
  // since it was recorded, or one that cannot move now (no room, a device error on the copy),
  // stays in host (counted in gpu_promotions_skipped; a device error also in the GPU tier's
  // copy_errors) until a later read offers it again. Returns the blocks moved; 0 without a GPU
  // tier.
  size_t PromoteCandidates(size_t max_blocks);

  // Candidates waiting for PromoteCandidates.
  size_t PendingPromotions() const { return promotion_queue_.size(); }

  // The background mover's side of background_disk_moves (daemon/mover/tier_mover.h).
  // SetMoverWakeup: how the store wakes it when a request needs it (set before serving; called
  // with no store lock held). TakeRoomRequest: the largest block size a put found no room for
  // since the last call (0: none). MakeRoom: evicts host blocks (demoting them to NVMe) until a
  // block of `bytes` fits; false when nothing more could go. TakeFetchRequests: up to `max` blocks
  // readers asked to have brought up, oldest first (FetchRequestsWaiting: whether any is).
  // Fetch: brings such blocks up into the host tier, reading them from NVMe as one batch, or
  // remembers for each that it could not.
  // MoveWorkPending: whether any of these is waiting.
  void SetMoverWakeup(std::function<void()> wake) { wake_mover_ = std::move(wake); }
  // Who is told, on the mover's threads, when a fetch ended or room was made: requests that got
  // kPending may try again. May be set and cleared at any time (MoveRequests::SetMoveListener).
  void SetMoveListener(std::function<void()> listener) {
    move_requests_.SetMoveListener(std::move(listener));
  }
  uint64_t TakeRoomRequest() { return move_requests_.TakeRoomRequest(); }
  bool MakeRoom(uint64_t bytes);
  std::vector<BlockKey> TakeFetchRequests(size_t max) { return move_requests_.TakeFetches(max); }
  bool FetchRequestsWaiting() const { return move_requests_.HasFetches(); }
  void Fetch(std::span<const BlockKey> keys);
  // Write-throughs committed puts asked for (TakeWriteThroughRequests), and the mover's call that
  // writes them to NVMe as one batch, each as the block's shadow, and ends their wait.
  std::vector<WriteThroughRequest> TakeWriteThroughRequests(size_t max) {
    return move_requests_.TakeWriteThroughs(max);
  }
  void WriteThrough(std::span<const WriteThroughRequest> requests);
  // Remote write-through (remote.write_through): the committed blocks to copy to the remote tier,
  // and the mover's call that SETs them as one batch (store_remote.cc), each pinned as a reader
  // pins it. Blocks the calling thread for up to remote.timeout. A block no longer in the host
  // tier is skipped: it is published when it leaves the node.
  std::vector<WriteThroughRequest> TakeRemoteWriteThroughRequests(size_t max) {
    return move_requests_.TakeRemoteWriteThroughs(max);
  }
  void WriteThroughToRemote(std::span<const WriteThroughRequest> requests);
  bool MoveWorkPending() const { return move_requests_.HasWork(); }
  // The remote tier's side (store_remote.cc). TakeRemoteFetchRequests: up to `max` blocks readers
  // missed locally, which the mover should try to fetch from the remote tier (Acquire asks for it,
  // with a remote tier and background_disk_moves, and answers kPending). FetchRemote: for the
  // mover: GETs these blocks as one batch (within remote.timeout; it blocks the calling thread),
  // verifies each record (a checksum mismatch or another record is a miss and counted in
  // remote_fetch_corrupt, never bytes) and stores it in the host tier as a ready block, making
  // room there as the mover does; a block it could not bring is remembered, so the reader's next
  // call misses instead of asking again.
  // At most `max_bytes` of blocks are taken (the first always), so that large blocks spread over
  // the mover's threads and are stored as each arrives rather than after a whole batch.
  std::vector<std::pair<NamespaceId, BlockKey>> TakeRemoteFetchRequests(
      size_t max, uint64_t max_bytes = UINT64_MAX);
  void FetchRemote(std::span<const std::pair<NamespaceId, BlockKey>> blocks);
  // Asks the remote tier which of `keys` (of namespace `ns`) it holds, without waiting: `done(n)`
  // runs once, on the remote store's own thread, with the number of leading keys it holds (0 on
  // any error or past remote.lookup_timeout); then the requests waiting for the mover are told
  // (SetMoveListener). `done` must not block. false without a remote tier, or for a node-local
  // namespace, never published (`done` never runs).
  bool StartRemoteLookup(const NamespaceId& ns, std::vector<BlockKey> keys,
                         std::function<void(size_t found)> done);
  bool HasRemoteTier() const { return options_.remote.store != nullptr; }
  // Whether the mover keeps room in the host tier ahead of demand: a tier lies below it, local
  // (NVMe) or remote (where the blocks it drops are published).
  bool HostHasTierBelow() const;
  // background_disk_moves: asks the mover to bring up every block of the ready prefix of `keys`
  // that lies on NVMe, and to fetch from the remote tier the blocks that follow that prefix and
  // no local tier holds, without waiting, so that a reader about to lease a whole prefix waits for
  // the slowest of its blocks rather than for each in turn. Does nothing otherwise.
  void PrefetchForRead(const NamespaceId& ns, std::span<const BlockKey> keys);

  // What FlushToNvme did, for the daemon's last log line.
  struct FlushResult {
    uint64_t written = 0;          // blocks copied into NVMe
    uint64_t written_bytes = 0;    // their payload bytes
    uint64_t already_durable = 0;  // blocks moved into their copy on NVMe: nothing written
    uint64_t left = 0;             // memory blocks not flushed (see FlushToNvme)
    // Some block was left because NVMe had no room for it that dropping older blocks could make.
    bool nvme_full = false;
  };

  // For a clean stop: moves the blocks of the memory tiers (GPU, then host) into the NVMe tier,
  // most recently used first, so that a restart serves them again. Room is made by dropping older
  // NVMe blocks, least recently used first, as many as a block needs (a large block among small
  // ones may need thousands), never a block this flush wrote. A block is left in memory (counted
  // in `left`, with nvme_full) when no room can be made for it: every older block is gone, or the
  // blocks this flush wrote leave less than its size; no older block is dropped for it then, and
  // later, smaller blocks still take the room that is free. The flush stops at `deadline_us` on
  // the store's clock (0: no deadline) and when `stop` is requested; blocks not flushed stay where
  // they are (`left`).
  // NVMe admission is not asked: at a stop, keeping a block beats saving the device a write.
  // Blocks leased, pinned by a mover or being written stay too: call it after the server has
  // closed every connection. A device error on one block leaves that block and goes on. Does
  // nothing without an NVMe tier.
  FlushResult FlushToNvme(uint64_t deadline_us, std::stop_token stop = {});

  // Adds a block that a durable tier found at start-up (warm restart), ready, as the most recently
  // used of its tier: adopt the oldest first. Its namespace serves it once registered again.
  // kInvalidArgument for a tier the store does not have; kAlreadyExists when the key is taken;
  // kRejected when its namespace was dropped while adoption was pending (SetPendingAdoptions), or
  // when its key was removed or put since the start: the recovered copy is older than what a
  // client did since (a DEL must not come undone). The caller frees the extent of a block refused
  // (which deletes its record, so that the next start does not bring it back either).
  Status AdoptBlock(TierId tier, const NamespaceId& ns, const BlockKey& key, const Extent& extent,
                    std::optional<uint64_t> checksum);

  // How many blocks a durable tier found at start-up are still to be adopted: the daemon adopts
  // them while it serves and says so in the statistics (pending_adoptions) until it is done.
  void SetPendingAdoptions(uint64_t blocks);
  uint64_t pending_adoptions() const { return pending_adoptions_.load(std::memory_order_relaxed); }

  // For each of `keys`, whether it is here in namespace `ns` (and in which tier) or, when absent,
  // its newest departure in the departure log (options.departure_log_entries). Touches nothing
  // and counts no lookup: asking why a block misses must not keep it, or its prefix, warm. Costs
  // a scan of the whole log (DepartureLog::Find): for diagnostics, not for the request path.
  std::vector<BlockExplanation> Explain(const NamespaceId& ns,
                                        std::span<const BlockKey> keys) const;
  // For each of `keys`, the tier holding it ready in namespace `ns` (SizeOf's), or nullopt.
  // Touches nothing.
  std::vector<std::optional<TierId>> Where(const NamespaceId& ns,
                                           std::span<const BlockKey> keys) const;
  // The size of block `key` when it is ready in namespace `ns`, or nullopt. Touches nothing.
  std::optional<StoredSize> SizeOf(const NamespaceId& ns, const BlockKey& key) const;
  // The space a block of `bytes` takes in tier `tier` (Tier::FootprintOf), or `bytes` for a tier
  // this store does not have. Asked apart from SizeOf, which every generic command's liveness
  // check reads: the memory tiers answer under their allocator's lock.
  uint64_t FootprintOf(TierId tier, uint64_t bytes) const;
  // The log Explain reads: its capacity and how many departures it saw.
  const DepartureLog& departures() const { return departures_; }
  // The name of `tier`'s eviction policy ("lru", ...; tiers may differ: index.policy per tier).
  std::string_view eviction_policy(TierId tier) const { return index_->policy_name(tier); }

  // Walks the index and every tier: for /stats, /metrics and INFO, not for every request.
  StoreStats Stats() const;
  // Ready blocks, from the counters in O(1) (DBSIZE): Stats().blocks_present when no put or
  // removal is in flight, and off by about those in flight otherwise (a namespace drop counts its
  // removals when it ends).
  uint64_t PresentBlocks() const;
  static constexpr uint64_t kQuarantineFactor = 10;
  // The tier with `id`, or nullptr.
  tiers::Tier* tier(TierId id) const;
  // The memory of tier `id` as clients on the node map it (the host arena for KVT.ATTACH, the GPU
  // pool for KVT.GPUATTACH): the server hands these out without knowing the tiers behind them.
  // Lease and reservation extents of that tier are offsets into it. kNotFound when the store has
  // no such tier; the tier's error otherwise (tiers::Tier::ExportForClients).
  Result<tiers::PoolExport> ExportForClients(TierId id) const;
  // The tier puts land in (host, or the first tier of a chain without one).
  TierId put_tier() const { return tiers_[put_level_]->id(); }

 private:
  Store(const StoreOptions& options, std::vector<tiers::Tier*> tiers,
        std::unique_ptr<placement::AdmissionPolicy> admission,
        std::unique_ptr<placement::GpuPromotionPolicy> gpu_promotion, Clock& clock,
        std::unique_ptr<index::BlockIndex> index);

  // How an eviction treats its victims: kDemote writes them to the next tier when admitted (or
  // drops them from the last tier); kDropOnly never waits for a copy: a victim leaves for its
  // write-through copy on NVMe when it has one, and is dropped otherwise.
  enum class EvictionMode { kDemote, kDropOnly };
  // Allocates `bytes` in tiers_[level], making room by evicting that tier's victims.
  // `requester`: the quota group whose block needs the room (BlockIndex::PickVictim; 0: none).
  Result<Extent> AllocateWithEviction(size_t level, uint64_t bytes,
                                      EvictionMode mode = EvictionMode::kDemote,
                                      uint8_t requester = 0);
  // Makes room in tiers_[level] by moving one victim down or dropping it. false: nothing could go.
  bool EvictOne(size_t level, EvictionMode mode = EvictionMode::kDemote, uint8_t requester = 0);
  // Empties the tier's reclaim unit (slab) around its least recently used block, for a block size
  // that LRU eviction of other sizes cannot make room for. false: nothing could go.
  bool EvictReclaimUnit(size_t level, EvictionMode mode, uint8_t requester, uint64_t bytes);
  // Every offset of a tier, whatever its layout (the NVMe tier's files follow one another).
  static constexpr Extent kWholeTier{0, std::numeric_limits<uint64_t>::max()};
  // Frees the NVMe copies of memory blocks (kept from a read up, not write-through ones) that
  // start inside `unit`, until they free `enough_bytes` of room; the blocks stay where they are.
  // Returns how many.
  size_t DropCopiesIn(tiers::Tier& t, const Extent& unit,
                      uint64_t enough_bytes = std::numeric_limits<uint64_t>::max());
  // Frees `meta`'s copy on `nvme` (the NVMe tier) if the entry still has it and nothing pins
  // the block; false when it was not there to free (or is a write-through copy).
  bool DropCopyOf(tiers::Tier& nvme, const BlockKey& key, const index::BlockMeta& meta);
  // The evictable blocks of tier `t` starting inside `unit`, the reclaim unit around `victim`:
  // the victim alone when the unit is its extent, else named by the tier where it can
  // (Tier::BlocksStartingIn), else found by a scan of the index.
  std::vector<std::pair<BlockKey, index::BlockMeta>> EvictableInUnit(
      const tiers::Tier& t, const Extent& unit, const std::pair<BlockKey, index::BlockMeta>& victim,
      uint64_t now_us) const;
  // True when an allocation of `bytes` below the put tier should evict past
  // max_evictions_per_allocation (see its definition).
  bool NeedsMoreVictims(size_t level, uint64_t bytes) const;
  bool DemoteOrDrop(size_t level, const BlockKey& key, const index::BlockMeta& meta,
                    EvictionMode mode);
  // What evicting a victim of tiers_[level] may do: is there a tier below, does it admit the
  // block, and may this eviction wait for the copy (may_demote).
  struct EvictionPlan {
    bool below = false;
    bool admitted = false;
    bool may_demote = false;
  };
  // Asks the admission policy once: an eviction plans once and settles with that plan.
  EvictionPlan PlanEviction(size_t level, const BlockKey& key, const index::BlockMeta& meta,
                            EvictionMode mode);
  // Whether a victim of tiers_[level] already has its bytes in the tier below (a write-through
  // copy on NVMe), so that moving it down is an index change with no copy.
  bool HasCopyBelow(size_t level, const index::BlockMeta& meta) const;
  enum class DemoteOutcome { kMoved, kBlockChanged, kNoRoomBelow, kCopyFailed };
  // Ends an eviction: counts a move (`outcome` kMoved), or puts back a block that changed, or
  // drops the victim (no demotion tried, no room below, the copy failed) and counts why. true
  // when the victim left the tier.
  bool SettleEviction(const BlockKey& key, const index::BlockMeta& meta, const EvictionPlan& plan,
                      std::optional<DemoteOutcome> outcome);
  // Demotes or drops victims EvictToTarget picked of tiers_[level]; those whose bytes must be
  // copied down go as one batch.
  void DemoteVictims(size_t level, std::span<const std::pair<BlockKey, index::BlockMeta>> victims);
  // A demotion's outcome from PrepareMove's error, and from the move's status.
  static DemoteOutcome UnpreparedOutcome(const Status& prepared);
  static DemoteOutcome MovedOutcome(const Status& moved);
  // Copies a victim into tiers_[level + 1] and repoints it there. kBlockChanged: leased, removed
  // or replaced meanwhile (it stays where it is); kNoRoomBelow: the next tier could not take it;
  // kCopyFailed: a device error on the copy (counted).
  DemoteOutcome Demote(size_t level, const BlockKey& key, const index::BlockMeta& meta);
  // Copies a block that PinForMove pinned from tiers_[level] into `dst` in tiers_[to_level] and
  // repoints it there. OK: the old extent is freed and the pin went with the move. Otherwise
  // `dst` is freed and the block unpinned where it was; the error is the copy's (kDeviceError,
  // counted; kChecksumMismatch: its bytes failed verification) or the index's (it changed).
  Status MovePinned(size_t level, size_t to_level, const BlockKey& key,
                    const index::BlockMeta& meta, const Extent& dst);
  // A block pinned for a move (PinForMove), with its room in the destination tier. `status`: the
  // copy's, then the whole move's (MovePinnedBatch).
  struct PinnedMove {
    BlockKey key;
    index::BlockMeta meta;
    Extent dst;
    Status status;
  };
  // Pins a block and allocates its room in tiers_[to_level] (evicting there if needed). kNotFound
  // when it changed since it was picked or is leased; the allocation's error otherwise. Nothing is
  // held on error.
  Result<PinnedMove> PrepareMove(size_t to_level, const BlockKey& key, const index::BlockMeta& meta,
                                 EvictionMode mode = EvictionMode::kDemote);
  // MovePinned for many blocks: their copies go to a device together (CopyBatch), then each is
  // finished as MovePinned finishes one; each move's status is MovePinned's answer for it.
  void MovePinnedBatch(size_t level, size_t to_level, std::span<PinnedMove> moves);
  Status FinishMove(tiers::Tier& from, tiers::Tier& to, const PinnedMove& move);
  // Whether a block moved from `from` to `to` keeps its old extent as its NVMe copy (a read up
  // from NVMe: StoreOptions::nvme_write_through, nvme_copy_share).
  bool KeepsCopyOnNvme(const tiers::Tier& from, const tiers::Tier& to,
                       const index::BlockMeta& meta) const;
  // The copies of a batch (Tier::WriteBlocks / ReadBlocks between memory and a device).
  // `must_survive_restart`: write-through copies, acknowledged as durable (BlockWrite).
  void CopyBatch(tiers::Tier& from, tiers::Tier& to, std::span<PinnedMove> moves,
                 bool must_survive_restart = false);
  Status CopyBetweenTiers(tiers::Tier& from, const Extent& src, tiers::Tier& to, const Extent& dst,
                          const tiers::BlockIdentity& identity);
  // Repoints a block whose bytes were copied to (`to`, `dst`), taking back the mover's pin. A
  // write-through shadow stays with a block that moves between the memory tiers;
  // `old_extent_becomes_shadow`: the extent it leaves (on NVMe) stays as its shadow.
  Status MoveInIndex(const BlockKey& key, const index::BlockMeta& meta, TierId to,
                     const Extent& dst, bool old_extent_becomes_shadow = false);
  // Counts a failed copy between two tiers against the one that is a device (not host memory).
  void CountCopyError(const tiers::Tier& from, const tiers::Tier& to);
  // Pins a ready, unleased block for a mover (a lease the store holds itself) so that nobody frees
  // its extent while its bytes are copied. false: it changed since it was picked or is leased.
  bool PinForMove(const BlockKey& key, const index::BlockMeta& meta);
  void UnpinAfterMove(const BlockKey& key);
  // Whether a victim of tiers_[level] may be written to tiers_[level + 1] (NVMe admission, and a
  // full last tier's eviction policy: EvictionPolicy::AdmitsNew).
  bool AdmitBelow(size_t level, const BlockKey& key, const index::BlockMeta& meta);
  // Whether making room in tiers_[level] drops blocks (the last tier, with no remote tier to
  // publish them to) rather than moving them down.
  bool EvictionDrops(size_t level) const;
  // For a new block that full tiers_[level] would make room for by dropping blocks: whether its
  // eviction policy takes it (EvictionPolicy::AdmitsNew). When not, tells the policy and counts it
  // in not_admitted_blocks. Always true where eviction moves blocks down instead.
  bool LastTierAdmits(size_t level, const BlockKey& key, uint8_t group);
  enum class PromoteOutcome { kMoved, kNotMoved, kCorrupt };
  // Moves a ready block from tiers_[level] up to tiers_[to_level]. kNotMoved: it changed, is
  // leased, there is no room, or the copy failed (counted); it stays where it is. kCorrupt: its
  // bytes failed verification and the block was dropped.
  PromoteOutcome Promote(size_t level, size_t to_level, const BlockKey& key,
                         const index::BlockMeta& meta);
  // Ends a promotion out of tiers_[level] whose move was tried: counts it, or drops a block
  // whose bytes failed verification (kCorrupt).
  PromoteOutcome SettlePromotion(size_t level, const PinnedMove& move);
  // Before a lease: brings a block that lives below the host tier up into it, when configured.
  // kPending: it lies on NVMe and the mover was asked for it (background_disk_moves).
  Status PromoteForRead(const NamespaceId& ns, const BlockKey& key);
  // The oldest fetch failure that still answers a reader (MoveRequests::TakeFailedFetch): none
  // waits longer than StoreOptions::reader_wait.
  std::chrono::steady_clock::time_point FailuresSince() const {
    return std::chrono::steady_clock::now() - options_.reader_wait;
  }
  // BeginPut's allocation when the mover makes room: no eviction here, a request for room instead
  // (which the mover makes without knowing the requester's quota group).
  Result<Extent> AllocateOrAskForRoom(uint64_t bytes, uint8_t requester);
  // The quota group of a namespace described by `info`, by the rules now.
  uint8_t QuotaGroupOf(const NamespaceInfo& info) const;
  // The level of a block that lies below the host tier (where a reader's promotion comes from),
  // or tiers_.size() when it lies in or above it, or the store has no host tier.
  size_t LevelBelowHost(const index::BlockMeta& meta) const;
  // Whether moves out of (or up into) tiers_[level] wait for a disk, or the network of the remote
  // tier, and are the mover's to do.
  bool DiskMovesInBackground(size_t level) const;
  // store_remote.cc. Whether the victims of tiers_[level] are published to the remote tier before
  // they are dropped: it is the last local tier and there is a remote tier.
  bool PublishesDrops(size_t level) const;
  // The clock of BlockMeta::remote_copy_s, and whether a block's write-through copy is younger
  // than half of remote.ttl (its drop needs no second copy).
  uint32_t RemoteClockSeconds() const;
  bool RemoteCopyIsFresh(const index::BlockMeta& meta) const;
  // How PublishToRemote pins a block while it reads and sends its bytes: alone (a victim about to
  // be dropped: PinForMove), or beside its readers (a write-through copy: the block stays).
  enum class RemotePin : uint8_t { kExclusive, kShared };
  // For each block about to be published: whether the cluster still holds its recent
  // write-through copy, which makes the publish unneeded (kExclusive pins only: a drop).
  std::vector<bool> StillInCluster(std::span<const std::pair<BlockKey, index::BlockMeta>> blocks,
                                   RemotePin pin);
  // Writes blocks of tiers_[level] to the remote tier as one batch (SET ... PX ttl), each pinned
  // while its bytes are read. Best effort: one that cannot be read or is refused by the store is
  // counted (a victim is dropped all the same by the caller). Returns the keys of the blocks it
  // could not pin (leased or changed since they were picked): a victim among them must not be
  // dropped, since it was not published (its lease may end before the caller drops it).
  // Blocks the calling thread for up to the remote timeout: the mover's threads only.
  std::vector<BlockKey> PublishToRemote(
      size_t level, std::span<const std::pair<BlockKey, index::BlockMeta>> blocks,
      RemotePin pin = RemotePin::kExclusive);
  // A reader's pin on a block unchanged since `meta` was read; released by UnpinAfterMove.
  bool PinAsReader(const BlockKey& key, const index::BlockMeta& meta);
  // Acquire's miss with a remote tier: asks the mover to fetch the block (kPending), or OK when
  // it cannot be asked (no remote tier, unknown namespace) or the last fetch failed (a miss).
  Status FetchRemoteForRead(const NamespaceId& ns, const BlockKey& key);
  // PrefetchForRead's part for the keys past the local chain: asks the mover to fetch the
  // leading ones no local tier knows from the remote tier (at most kMaxRemotePrefetch). true when
  // it asked for any.
  bool PrefetchRemote(const NamespaceId& ns, std::span<const BlockKey> keys);
  // FetchRemote's end for one block: its verified payload stored in the host tier as a ready
  // block. OK or kAlreadyExists: the reader will find it; otherwise BeginPut's error.
  Status StoreFetched(const NamespaceId& ns, const BlockKey& key,
                      std::span<const std::byte> payload, uint64_t checksum);
  // Victims of tiers_[level] an allocation's eviction is about to drop, published first when the
  // level is below the put tier and publishes its drops (NVMe above a remote tier).
  // Returns the victims PublishToRemote could not pin, to be kept.
  std::vector<BlockKey> PublishBeforeDrop(
      size_t level, std::span<const std::pair<BlockKey, index::BlockMeta>> victims);
  // Victims picked from tiers_[level]'s policy leave it: published first (PublishBeforeDrop),
  // then demoted or dropped; one leased since it was picked is handed back to the policy.
  void DropPickedVictims(size_t level,
                         std::span<const std::pair<BlockKey, index::BlockMeta>> victims,
                         EvictionMode mode);
  // Before victims of tiers_[level] are demoted into the last tier when it publishes its drops:
  // room there for them, made by publishing that tier's coldest blocks (EvictToTarget), so that
  // the demotions' allocations do not drop blocks unpublished to make it.
  void MakeRoomBelowByPublishing(size_t level,
                                 std::span<const std::pair<BlockKey, index::BlockMeta>> victims);
  // MakeRoom when the put level publishes its drops: evicts through EvictToTarget (which
  // publishes) until a block of `bytes` fits; false when that could not make room.
  bool MakeRoomByPublishing(uint64_t bytes);
  // After a lease of a host block that the GPU promotion policy picked: records it for the mover.
  void QueueForGpu(const BlockKey& key, uint64_t generation);
  enum class CandidateOutcome { kMoved, kLeased, kSkipped };
  // One candidate of PromoteCandidates. kLeased: a reader holds it now; try again later.
  CandidateOutcome PromoteCandidate(const placement::PromotionCandidate& candidate);
  // WriteThrough's parts: a request's block pinned (as a reader would) with room on NVMe, or
  // nullopt when it changed or NVMe has no room (counted); and the copy made its shadow.
  // The copy of `request` pinned, with its room on NVMe; nullopt with `outcome` set when none is
  // made (OK: the block changed and needs none; an error: no room).
  std::optional<PinnedMove> PrepareWriteThrough(size_t level, const WriteThroughRequest& request,
                                                Status& outcome);
  // Makes the written copy the block's shadow; the copy's outcome (FinishWriteThrough).
  Status AttachWriteThrough(tiers::Tier& nvme, const PinnedMove& copy);
  // Demotes a host block that has a shadow on NVMe by moving it into the shadow: no copy.
  DemoteOutcome DemoteIntoShadow(size_t level, const BlockKey& key, const index::BlockMeta& meta);
  // FlushToNvme's parts: the ready blocks of tier `id`, taken out of its eviction order, most
  // recently used first; one block's move into NVMe; and NVMe room that may drop only blocks not
  // in `flushed` (generations this flush wrote), publishing them first above a remote tier while
  // the flush has time.
  struct FlushState {
    std::unordered_set<uint64_t> flushed;
    uint64_t deadline_us = 0;  // 0: none
    std::stop_token stop;
    uint64_t unflushed_bytes = 0;  // memory blocks after the one being flushed
    // NVMe bytes the blocks this flush put there take (their footprints): the room no eviction
    // can give back.
    uint64_t flushed_reserved_bytes = 0;
    // Every NVMe block older than the flush is gone (or cannot be evicted): later blocks only
    // take room that is free.
    bool nothing_older_left = false;
    // NVMe blocks the flush wrote that the policy offered as victims: out of its order until the
    // flush ends, so that the blocks after them are looked at, each once.
    std::vector<BlockKey> set_aside;
    // The memory blocks with a copy on NVMe, in the flush's order: when no older NVMe block is
    // left, the copies of the last ones (not flushed yet) give way to the block being flushed.
    std::vector<std::pair<BlockKey, index::BlockMeta>> with_copies;
  };
  // Drops the copies of the last blocks in `flush.with_copies` until `enough_bytes` of room is
  // free; false when none could be dropped.
  bool DropLastCopies(uint64_t enough_bytes, FlushState& flush);
  bool OutOfTime(const FlushState& flush) const;
  std::vector<std::pair<BlockKey, index::BlockMeta>> TakeNewestFirst(TierId id);
  enum class FlushOutcome { kWritten, kAlreadyDurable, kNvmeFull, kNotMoved };
  // `on_nvme`: where the block lies on NVMe now, when it moved.
  FlushOutcome FlushBlock(size_t level, const BlockKey& key, const index::BlockMeta& meta,
                          FlushState& flush, Extent& on_nvme);
  // Room on NVMe for `bytes`, dropping older NVMe blocks (oldest first) until a hole fits it.
  // kBusy when none fits and none can be made.
  Result<Extent> AllocateForFlush(uint64_t bytes, FlushState& flush);
  // True when NVMe's capacity less the flushed blocks' footprints is under `bytes`.
  bool NoRoomCanBeMade(uint64_t bytes, const FlushState& flush) const;
  // True when NVMe's free bytes, holes together, reach `bytes`.
  bool FitsFreeSpace(uint64_t bytes) const;
  // Records in the departure log that `meta`'s block left the node from its tier. `used_bytes`:
  // the tier's fill before it left (pressure), for evictions; 0 when not measured.
  void RecordDeparture(const BlockKey& key, const index::BlockMeta& meta, DepartureReason reason,
                       EvictionCause cause = EvictionCause::kNone,
                       const tiers::TierStats* tier_stats = nullptr);
  // Drops a block whose bytes failed verification or a read, if nobody holds it.
  void DropCorrupt(const BlockKey& key, const index::BlockMeta& meta);
  // Whether a failed read of `key` (in `tier`, at `offset`) means the block is to be dropped: its
  // bytes failed verification, or its NVMe reads kept failing (ReadFailures).
  bool ReadMakesUnservable(TierId tier, const BlockKey& key, uint64_t offset, const Status& read);
  // The position of tier `id` in tiers_, or tiers_.size() when absent.
  size_t LevelOf(TierId id) const;
  // A reservation's record: removed from the table when `erase` (an expired one then has its
  // space freed and answers kNotFound), only looked at otherwise. kNotFound when unknown.
  Result<ReservationRecord> TakeReservation(uint64_t reservation_id, bool erase);
  // Put's and StoreFetched's second half: copies `bytes` into a reservation and commits it, or
  // aborts it when the copy failed.
  Status FillAndCommit(const Reservation& r, std::span<const std::byte> bytes,
                       std::optional<uint64_t> checksum);
  // Second half of CommitPut and CommitPutAs: the record has left reservations_.
  Status Publish(const ReservationRecord& record, std::optional<uint64_t> checksum);
  // Removes a reservation's kWriting entry (only that incarnation); its extent stays allocated.
  void ForgetWriting(const ReservationRecord& record);
  // ForgetWriting, and frees the extent.
  void DiscardWriting(const ReservationRecord& record);
  // Frees a block's extent in its tier after it left the index.
  void FreeExtent(const index::BlockMeta& meta);
  // Ends a lease and drops the block if its namespace has been dropped meanwhile.
  void EndLease(const LeaseRecord& lease);
  // After a lease or a mover's pin of the block ended: removes it (unless still leased, or no
  // longer the incarnation `meta` describes) when its namespace has been dropped meanwhile, as
  // DropNamespace would have.
  void RemoveIfNamespaceDropped(const BlockKey& key, const index::BlockMeta& meta);
  // CountLookup, for a namespace already found (one registry lookup per lookup command).
  static void CountLookupIn(const NamespaceRegistry::Entry& entry, size_t asked,
                            const index::LookupResult& local, size_t remote_found);

  const StoreOptions options_;
  const std::vector<tiers::Tier*> tiers_;
  const size_t put_level_;  // the host tier's position: where puts land
  const size_t gpu_level_;  // the GPU tier's position (0), or tiers_.size() without one
  // The room NVMe copies may take (nvme_copy_share of the NVMe tier's capacity, which does not
  // change), read once: KeepsCopyOnNvme asks on every promotion. 0 without an NVMe tier.
  const uint64_t nvme_copy_room_;
  std::unique_ptr<placement::AdmissionPolicy> admission_;
  std::unique_ptr<placement::GpuPromotionPolicy> gpu_promotion_;
  placement::PromotionQueue promotion_queue_;
  Clock& clock_;
  std::unique_ptr<index::BlockIndex> index_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> pending_adoptions_{0};
  // While adoption is pending: keys removed or put since the start, whose recovered copies are
  // refused. Cleared when adoption ends.
  Mutex adoption_mu_;
  std::unordered_set<BlockKey, Key128Hash> changed_during_adoption_ GUARDED_BY(adoption_mu_);
  // While adoption is pending: records `key` in changed_during_adoption_, and has the tiers drop
  // its recovered copies not adopted yet (Tier::DropRecoveredCopies), which would otherwise come
  // back at the next restart if this run ended before adopting them.
  void NoteChangedDuringAdoption(const NamespaceId& ns, const BlockKey& key);
  // Per tier: bytes of victims EvictToTarget has picked and not moved yet.
  std::array<std::atomic<uint64_t>, kTierCount> evicting_bytes_{};
  MoveRequests move_requests_;
  std::function<void()> wake_mover_;

  NamespaceRegistry namespaces_;
  // Held by RegisterNamespace and SetQuota (both rare), so that each namespace's group follows
  // the rules. Taken before the registry's and the index's locks.
  Mutex quota_mu_;
  QuotaTable quotas_;
  ReservationTable reservations_;
  LeaseTable leases_;
  ReadFailures read_failures_;

  StoreCounters counters_;
  std::array<TierCounters, kTierCount> tier_counters_;
  MoveStats move_stats_;
  DepartureLog departures_;
};

}  // namespace kvtier::store
