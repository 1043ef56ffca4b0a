// EvictionPolicy: the order in which the blocks of one tier are given up under pressure.
//
// A policy tracks a set of block keys and answers one question: which key goes next. It holds no
// block metadata and never frees anything itself; the store (or the trace simulator) calls
// PopVictim, then removes or demotes that block. Policies are chosen by name in configuration
// (MakeEvictionPolicy), so LRU and the alternatives run through the same index and store code.
//
// Thread safety: none. Each tier's policy is guarded by its owner's mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/keys.h"
#include "common/status.h"

namespace kvtier::index {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // "lru", "s3fifo", ...
  virtual std::string_view name() const = 0;

  // Starts tracking `key` as just used. Precondition: `key` is not tracked.
  virtual void Insert(const BlockKey& key) = 0;

  // Records a use of `key`. A no-op when `key` is not tracked (it may have been evicted by another
  // thread between a lookup and its touch).
  virtual void Touch(const BlockKey& key) = 0;
  // Touch of every key of `run` (part of one lookup's prefix), the deepest (last) first, so that
  // the head of the prefix ends up the most recent. The same as Touch key by key; a policy that
  // reads a clock per use reads it once here (a lookup's keys are used at one moment).
  virtual void TouchRun(std::span<const BlockKey> run) {
    for (size_t i = run.size(); i-- > 0;) Touch(run[i]);
  }

  // Puts `key` back where a use would put it without it counting as a use: a policy that learns
  // from uses (gaps, frequencies, ghost hits) learns nothing. A client's KVT.REFRESH after it put
  // a request's new blocks (which left them more recent than the prefix they extend) gives the
  // chain back the order a lookup gives it. Only policies whose order is recency alone ("lru",
  // "sticky") do it; for the others, whose order counts uses, it is a no-op.
  virtual void Refresh(const BlockKey& key) { (void)key; }

  // Stops tracking `key` (removed or moved to another tier). A no-op when absent.
  virtual void Erase(const BlockKey& key) = 0;

  // Chooses the next key to evict and stops tracking it; nullopt when nothing is tracked. The
  // caller PutBacks a victim it finds it cannot evict (a leased block).
  virtual std::optional<BlockKey> PopVictim() = 0;

  // Tracks again a key that PopVictim returned and the caller did not evict (a leased or pinned
  // block), in the place a block just stored goes (so the other blocks are asked first next
  // time), without counting a use, a ghost hit or a gap: a block that could not be evicted was
  // not reused. Any victim may come back this way, not only the last one, and in any order. A
  // no-op when `key` is tracked.
  virtual void PutBack(const BlockKey& key) = 0;

  virtual bool Contains(const BlockKey& key) const = 0;
  virtual size_t size() const = 0;

  // Asked when the tier is full and a new block would push out the next victim: whether that
  // trade is worth making now. When false the caller does not store the new block and calls
  // NotAdmitted instead of Insert. Every policy but "sticky" always admits.
  virtual bool AdmitsNew() { return true; }
  // `key` was used but not stored because AdmitsNew said no; a policy that learns from uses counts
  // it, and may remember the key. Not called for a key the policy tracks.
  virtual void NotAdmitted(const BlockKey& key) { (void)key; }
};

// Milliseconds, never decreasing: what policies that learn from time read. Empty: the steady clock.
using PolicyClock = std::function<uint64_t()>;

// The policy a tier gets unless configured otherwise: it never lost more than 1% of LRU's block
// hits at any size on the traces in docs/simulate.md, and gains where the cache is small.
inline constexpr std::string_view kDefaultEvictionPolicy = "sticky";

// Names accepted by MakeEvictionPolicy, the default first.
std::vector<std::string> EvictionPolicyNames();

// Builds a policy by name. `capacity_hint_blocks` sizes policies that keep history (ghost queues)
// and may be 0 when unknown; `clock` is the time of policies that learn from it (the simulator
// passes the trace's). kInvalidArgument for an unknown name, listing the known ones.
Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                           size_t capacity_hint_blocks = 0,
                                                           PolicyClock clock = {});

}  // namespace kvtier::index
