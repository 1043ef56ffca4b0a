#include "daemon/store/store_stats.h"

#include <algorithm>

#include "daemon/store/store.h"

namespace kvtier::store {

uint64_t NamespaceStats::total_hit_blocks() const {
  uint64_t n = 0;
  for (uint64_t h : hit_blocks) n += h;
  return n;
}

double NamespaceStats::block_hit_ratio() const {
  return lookup_blocks == 0
             ? 0.0
             : static_cast<double>(total_hit_blocks()) / static_cast<double>(lookup_blocks);
}

uint64_t Store::PresentBlocks() const {
  // The counters are read one by one while puts and removals go on, and a block is ready a moment
  // before its commit is counted: a removal may be counted first, hence the clamp at zero.
  const uint64_t gone = counters_.evicted_blocks.load() + counters_.removed_blocks.load();
  const uint64_t came = counters_.committed_puts.load() + counters_.adopted_blocks.load();
  return came - std::min(came, gone);
}

StoreStats Store::Stats() const {
  StoreStats s;
  for (tiers::Tier* t : tiers_) {
    const TierCounters& c = tier_counters_[static_cast<size_t>(t->id())];
    s.tiers.push_back({t->id(),
                       t->Stats(),
                       c.evictions.load(),
                       c.demotions.load(),
                       c.copy_demotions.load(),
                       c.drops.load(),
                       c.admission_drops.load(),
                       c.lag_drops.load(),
                       c.promotions.load(),
                       c.corrupt_drops.load(),
                       c.copy_errors.load(),
                       {}});
    t->VisitDeviceStats([&](std::string_view name, double value) {
      s.tiers.back().device.emplace_back(std::string(name), value);
    });
  }
  std::vector<TierId> chain;
  for (tiers::Tier* t : tiers_) chain.push_back(t->id());
  s.moves = move_stats_.Snapshot(chain);
  namespaces_.ForEach(
      [&](const NamespaceId& id, const NamespaceInfo* info, const NamespaceCounters& counters) {
        NamespaceStats ns;
        ns.id = id;
        ns.registered = info != nullptr;
        if (info != nullptr) {
          ns.label = info->label;
          ns.tokens_per_block = info->tokens_per_block;
        }
        // Hits and misses before the blocks asked for, which a lookup counts first (CountLookup):
        // a lookup counted in between adds to the blocks asked for only, never hits without them.
        for (size_t t = 0; t < kTierCount; ++t) {
          ns.hit_blocks[t] = counters.hit_blocks[t].load(std::memory_order_acquire);
        }
        ns.miss_blocks = counters.miss_blocks.load(std::memory_order_acquire);
        ns.hit_tokens = counters.hit_tokens.load();
        ns.lookups = counters.lookups.load();
        ns.lookup_blocks = counters.lookup_blocks.load();
        ns.puts = counters.puts.load();
        ns.put_bytes = counters.put_bytes.load();
        ns.gets = counters.gets.load();
        ns.get_misses = counters.get_misses.load();
        ns.evictions = counters.evictions.load();
        s.namespaces.push_back(std::move(ns));
      });
  // Present blocks are the index's own count of its entries, not derived from the counters, so
  // that the accounting identity checked by the tests is a real check.
  const index::BlockIndex::EntryCounts entries = index_->entry_counts();
  s.blocks_present = entries.ready;
  s.blocks_writing = entries.writing;
  s.blocks_shadowed = entries.shadowed;
  s.shadow_bytes = index_->shadow_bytes();
  s.leases_active = leases_.size();
  s.blocks_quarantined = reservations_.quarantined();
  s.committed_puts = counters_.committed_puts.load();
  s.aborted_puts = counters_.aborted_puts.load();
  s.busy_puts = counters_.busy_puts.load();
  s.not_admitted_blocks = counters_.not_admitted_blocks.load();
  s.removed_blocks = counters_.removed_blocks.load();
  s.evicted_blocks = counters_.evicted_blocks.load();
  s.adopted_blocks = counters_.adopted_blocks.load();
  s.write_throughs = counters_.write_throughs.load();
  s.write_through_failures = counters_.write_through_failures.load();
  s.write_through_timeouts = counters_.write_through_timeouts.load();
  s.gpu_candidates = counters_.gpu_candidates.load();
  s.gpu_candidates_dropped = counters_.gpu_candidates_dropped.load();
  s.gpu_promotions_skipped = counters_.gpu_promotions_skipped.load();
  s.pending_promotions = promotion_queue_.size();
  s.pending_adoptions = pending_adoptions_.load(std::memory_order_relaxed);
  s.expired_leases = counters_.expired_leases.load();
  s.expired_reservations = counters_.expired_reservations.load();
  s.remote_publishes = counters_.remote_publishes.load();
  s.remote_publish_bytes = counters_.remote_publish_bytes.load();
  s.remote_publish_errors = counters_.remote_publish_errors.load();
  s.remote_write_through_skips = counters_.remote_write_through_skips.load();
  s.remote_publishes_saved = counters_.remote_publishes_saved.load();
  s.remote_fetches = counters_.remote_fetches.load();
  s.remote_fetch_bytes = counters_.remote_fetch_bytes.load();
  s.remote_fetch_misses = counters_.remote_fetch_misses.load();
  s.remote_fetch_corrupt = counters_.remote_fetch_corrupt.load();
  s.remote_fetch_errors = counters_.remote_fetch_errors.load();
  s.remote_fetches_expired = counters_.remote_fetches_expired.load();
  if (options_.remote.store != nullptr) {
    options_.remote.store->VisitStats(
        [&s](std::string_view name, double value) { s.remote_client.emplace_back(name, value); });
  }
  return s;
}

}  // namespace kvtier::store
