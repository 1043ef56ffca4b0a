// StoreOptions: how a Store is configured (what it does on a full tier, on a read below the host
// tier, with write-through, with a background mover and a remote tier). Plain values, validated
// by Store::Create; the daemon fills them from its configuration (daemon/kvtierd/daemon_tiers.cc).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/index/block_index.h"
#include "daemon/placement/gpu_promotion_policy.h"
#include "tiers/remote/remote_store.h"

namespace kvtier::store {

// The remote tier (docs/scale-out.md): a store shared by a fleet of daemons, below the last local
// tier. The store borrows it (the daemon owns it and destroys it after the store and the mover).
struct RemoteTierOptions {
  tiers::remote::RemoteStore* store = nullptr;   // nullptr: no remote tier
  std::chrono::milliseconds ttl{86'400'000};     // SET ... PX: how long the cluster keeps a block
  std::chrono::milliseconds timeout{1'000};      // one publish or fetch batch of the mover
  std::chrono::milliseconds lookup_timeout{20};  // StartRemoteLookup
  // Also copy each block committed into the host tier to the remote tier, from the mover, without
  // delaying the put's acknowledgement (best effort: a failed copy is counted, the block stays
  // local). Needs background_disk_moves. Without it, blocks reach the remote tier when they leave
  // the last local tier.
  bool write_through = false;
};

struct StoreOptions {
  uint64_t lease_timeout_us = 30'000'000;        // a lease not released by then is taken back
  uint64_t reservation_timeout_us = 30'000'000;  // a put not committed by then is aborted
  index::BlockIndex::Options index;
  // How many victims one allocation may evict before giving up with kBusy. Bounds the work a put
  // does when other threads keep taking the freed space.
  int max_evictions_per_allocation = 256;
  // Daemon-wide caps on open leases and reservations: each costs memory, and a local client could
  // otherwise open millions over many connections. Past them Acquire and BeginPut answer kBusy.
  size_t max_leases = 1 << 20;
  size_t max_reservations = 1 << 20;
  // A block leased while it sits below the host tier (NVMe) is first moved up into the host
  // arena, so that readers copy it out of memory ("promotion on hit"). false: it is read in place
  // by inline gets (ReadLeased), and the shared-memory path does not lease it.
  bool promote_on_read = true;
  // Which host blocks are written to NVMe when they are evicted (placement/admission_policy.h);
  // refused ones are dropped.
  std::string nvme_admission = "all";
  // Write-through: a put into the host tier is also written to NVMe, so an acknowledged block
  // survives a daemon crash and its later demotion costs no write. The NVMe copy is a shadow of
  // the host block (BlockMeta::shadow). Without background_disk_moves it is written before
  // CommitPut returns; with them the mover writes it, and whoever acknowledges the put waits
  // until WriteThroughPending(reservation id) is false. When NVMe cannot take it (full of blocks
  // that cannot be evicted, a device error), the put still succeeds in memory only and
  // write_through_failures counts it.
  bool nvme_write_through = false;
  // A block read up from NVMe keeps its NVMe copy as its shadow (as a write-through block does),
  // so that when it is evicted again it moves back into that copy and nothing is written
  // (bench/replay_bench.sh: 16% fewer bytes written to NVMe). The copy holds NVMe room the tier
  // cannot evict (it is not an NVMe block), so the copies together are kept to this share of the
  // NVMe tier's capacity; past it a promotion frees the copy as before. 0: never kept. Ignored
  // with nvme_write_through, which keeps every copy.
  double nvme_copy_share = 0.125;
  // Which host blocks move up into the GPU tier, when the chain has one (see
  // placement/gpu_promotion_policy.h), and how many candidates may wait for the GPU mover.
  placement::GpuPromotionOptions gpu_promotion;
  size_t max_promotion_candidates = 4096;
  // Moves that wait for a disk are left to a background mover (daemon/mover/tier_mover.h) instead
  // of running inside the request that needs them, so that no network thread waits for NVMe: a
  // put that finds the host tier full answers kPending and asks for room (it would otherwise
  // demote victims to NVMe itself), and a lease of a block on NVMe answers kPending and asks for
  // the block to be brought up (with promote_on_read). The caller calls again shortly. false: the
  // request does the move itself, for users of the store that run no mover.
  bool background_disk_moves = false;
  // The longest a request waits for a move it asked the mover for (the daemon sets it to
  // limits.mover_wait_ms, or remote.timeout_ms when that is longer). A remote fetch asked for
  // longer ago is dropped unsent, and a fetch that failed longer ago answers no reader: a read of
  // the block then asks again.
  std::chrono::milliseconds reader_wait{2'000};
  // With background_disk_moves: a put that finds the host tier full takes its room from the
  // coldest host blocks, dropping them (a block with a write-through copy on NVMe moves into it),
  // instead of waiting for the mover to write them to NVMe. The mover keeps writing the cold end
  // at the disk's pace; what it has not reached when room runs out is lost to the cache, and the
  // puts run at memory speed. false: the put waits (kPending) and puts run at the disk's pace.
  bool drop_when_disk_lags = false;
  // Time every move between tiers (MoveStats: a latency histogram per pair of tiers);
  // metrics.histograms. false: only the moved bytes are counted.
  bool latency_histograms = true;
  // With remote.store: the blocks the mover drops from the last local tier are published there
  // first (PublishToRemote). With background_disk_moves too, a put that finds the last local tier
  // full asks the mover for room (as it does with NVMe below), so that the publishing, which waits
  // for the network, never runs on a request's thread.
  RemoteTierOptions remote;
  // Entries of the departure log (daemon/store/departure_log.h): the last blocks that left the
  // node and why, for KVT.EXPLAIN. 64 bytes each: the default is 4 MiB. 0 keeps no log.
  size_t departure_log_entries = 65'536;
};

}  // namespace kvtier::store
