// Counters of the store, and the plain snapshot (StoreStats) that /metrics, INFO and
// `kvtier stats` all read, so every view shows the same numbers.
//
// Counters are relaxed atomics bumped on the request path; a snapshot is not a consistent cut
// across counters, which monitoring does not need. The accounting identity (committed = present +
// evicted + removed) holds exactly once the store is quiescent.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/keys.h"
#include "common/types.h"
#include "daemon/store/move_stats.h"
#include "tiers/tier.h"

namespace kvtier::store {

using Counter = std::atomic<uint64_t>;

struct NamespaceCounters {
  Counter lookups{0};                            // Lookup calls
  Counter lookup_blocks{0};                      // keys asked for
  std::array<Counter, kTierCount> hit_blocks{};  // blocks of the ready prefix, by tier
  // Keys asked for and not found, counted when the lookup ends (after the remote tier's answer):
  // a counter of its own, so that it never goes down (lookup_blocks less the hits did, for a
  // scrape between a lookup and its remote hits).
  Counter miss_blocks{0};
  Counter hit_tokens{0};
  Counter puts{0};  // committed puts
  Counter put_bytes{0};
  Counter gets{0};        // leases granted
  Counter get_misses{0};  // Acquire that found nothing
  Counter evictions{0};   // blocks of this namespace dropped from a tier, not moved down
};

struct TierCounters {
  Counter evictions{0};  // victims that left this tier (demoted or dropped)
  Counter demotions{0};  // victims moved to the next tier
  // Of those, victims moved into their copy already there (BlockMeta::shadow): nothing written.
  Counter copy_demotions{0};
  Counter drops{0};            // victims dropped because there is no next tier (or it failed)
  Counter admission_drops{0};  // victims dropped because the next tier's admission refused them
  // Victims a put dropped because the next tier is a disk the mover had not yet written them to
  // (StoreOptions::drop_when_disk_lags): cache the disk was too slow to keep.
  Counter lag_drops{0};
  Counter promotions{0};  // blocks moved up out of this tier (read often, or read on NVMe)
  Counter corrupt_drops{
      0};  // blocks of this tier whose bytes failed verification or a read (dropped)
  // Moves into or out of this tier whose copy failed with a device error (counted on the device
  // side of a copy, never on host memory): a promotion leaves the block where it was, a demotion
  // drops it.
  Counter copy_errors{0};
};

struct StoreCounters {
  Counter committed_puts{0};
  Counter aborted_puts{0};
  Counter busy_puts{0};               // BeginPut answered kBusy for lack of room
  Counter not_admitted_blocks{0};     // refused by a full last tier's policy (AdmitsNew)
  Counter removed_blocks{0};          // Remove and DropNamespace
  Counter evicted_blocks{0};          // dropped from a tier, not moved down
  Counter adopted_blocks{0};          // found on a durable tier at start-up (AdoptBlock)
  Counter write_throughs{0};          // puts also written to NVMe at commit
  Counter write_through_failures{0};  // puts that NVMe could not take (kept in memory only)
  Counter write_through_timeouts{0};  // puts answered before their copy: limits.mover_wait_ms
  Counter gpu_candidates{0};          // host blocks queued for promotion into the GPU tier
  Counter gpu_candidates_dropped{0};  // candidates refused because the queue was full
  Counter gpu_promotions_skipped{0};  // candidates not moved: changed, leased, no room, copy error
  Counter expired_leases{0};
  Counter expired_reservations{0};
  Counter remote_publishes{0};       // blocks written to the remote tier before their drop
  Counter remote_publish_bytes{0};   // their payload bytes
  Counter remote_publish_errors{0};  // blocks that could not be read or that the remote refused
  Counter remote_write_through_skips{0};  // committed blocks not copied: the queue was full
  Counter remote_publishes_saved{0};      // drops not sent: written through less than ttl/2 ago
  Counter remote_fetches{0};              // blocks fetched from the remote tier into host memory
  Counter remote_fetch_bytes{0};          // their payload bytes
  Counter remote_fetch_misses{0};         // fetches the remote tier had no block for
  Counter remote_fetch_corrupt{0};        // fetched records that failed verification (a miss)
  Counter remote_fetch_errors{0};         // fetches failed: timeout, remote error, no room in host
  Counter remote_fetches_expired{0};      // fetches dropped unsent: their readers stopped waiting
};

struct NamespaceStats {
  NamespaceId id;
  std::string label;
  uint32_t tokens_per_block = 0;
  bool registered = true;
  uint64_t lookups = 0;
  uint64_t lookup_blocks = 0;
  std::array<uint64_t, kTierCount> hit_blocks{};
  uint64_t hit_tokens = 0;
  uint64_t miss_blocks = 0;  // lookup_blocks - all hit blocks
  uint64_t puts = 0;
  uint64_t put_bytes = 0;
  uint64_t gets = 0;
  uint64_t get_misses = 0;
  uint64_t evictions = 0;
  uint64_t total_hit_blocks() const;
  double block_hit_ratio() const;  // hit blocks / lookup blocks; 0 when nothing was asked
};

struct TierStatsSnapshot {
  TierId tier = TierId::kHost;
  tiers::TierStats space;
  uint64_t evictions = 0;
  uint64_t demotions = 0;
  uint64_t copy_demotions = 0;
  uint64_t drops = 0;
  uint64_t admission_drops = 0;
  uint64_t lag_drops = 0;
  uint64_t promotions = 0;
  uint64_t corrupt_drops = 0;
  uint64_t copy_errors = 0;
  // The tier's own device counters (Tier::VisitDeviceStats), in its order.
  std::vector<std::pair<std::string, double>> device;
};

struct StoreStats {
  std::vector<TierStatsSnapshot> tiers;  // hottest first
  std::vector<NamespaceStats> namespaces;
  // Moves between tiers: one series per ordered pair of the store's tiers (MoveStats::Snapshot).
  std::vector<MoveSeries> moves;
  uint64_t blocks_present = 0;      // ready blocks
  uint64_t blocks_writing = 0;      // reserved, not yet committed
  uint64_t blocks_quarantined = 0;  // reservations that timed out; space held for the late writer
  uint64_t blocks_shadowed = 0;     // memory blocks with a copy on NVMe (BlockMeta::shadow)
  uint64_t shadow_bytes = 0;        // NVMe room those copies take (BlockIndex::shadow_bytes)
  uint64_t leases_active = 0;
  uint64_t committed_puts = 0;
  uint64_t aborted_puts = 0;
  uint64_t busy_puts = 0;
  uint64_t not_admitted_blocks = 0;
  uint64_t removed_blocks = 0;
  uint64_t evicted_blocks = 0;
  uint64_t adopted_blocks = 0;
  uint64_t write_throughs = 0;
  uint64_t write_through_failures = 0;
  uint64_t write_through_timeouts = 0;
  uint64_t gpu_candidates = 0;
  uint64_t gpu_candidates_dropped = 0;
  uint64_t gpu_promotions_skipped = 0;
  uint64_t pending_promotions = 0;  // candidates waiting for the GPU mover now
  uint64_t pending_adoptions = 0;  // blocks found at start-up, not served yet (SetPendingAdoptions)
  uint64_t expired_leases = 0;
  uint64_t expired_reservations = 0;
  uint64_t remote_publishes = 0;
  uint64_t remote_publish_bytes = 0;
  uint64_t remote_publish_errors = 0;
  uint64_t remote_write_through_skips = 0;
  uint64_t remote_publishes_saved = 0;
  uint64_t remote_fetches = 0;
  uint64_t remote_fetch_bytes = 0;
  uint64_t remote_fetch_misses = 0;
  uint64_t remote_fetch_corrupt = 0;
  uint64_t remote_fetch_errors = 0;
  uint64_t remote_fetches_expired = 0;
  // The remote store client's own counters (RemoteStore::VisitStats), in its order; empty
  // without a remote tier.
  std::vector<std::pair<std::string, double>> remote_client;
};

}  // namespace kvtier::store
