// GenericKeys: the names and expiry times of the generic key space's keys (generic_keyspace.h).
//
// A generic value is stored as a block whose key is a hash of its name, so the store alone cannot
// list names (SCAN, KEYS) or say when a value expires (EXPIRE, SET ... EX). This table can: one
// entry per key written through the generic commands, holding the name and the expiry time (Unix
// milliseconds, 0 for none). The values stay in the store; an entry whose block was evicted is
// found stale and dropped when next visited (a lookup, a SCAN, the expiry sweep).
//
// Entries live in memory; a clean stop writes them to a file that the next start reads back
// (generic_keys_file.h). After a crash the values that come back from NVMe are served as before
// (GET hashes the name) and a key is entered again, without an expiry, when a command names it;
// until then SCAN and KEYS do not list it (docs/protocol.md, "Key space").
//
// The table is cut into kStripes stripes by the top bits of the block key, and each stripe's mutex
// is also the key's write lock: a generic SET, GET or DEL holds it while it reads or replaces the
// value, so a key's entry and its block change together. Within a stripe, entries are ordered by
// block key, so stripes in order walk every entry in block-key order: a SCAN cursor is the upper 64
// bits of the next key to visit, and a key present for the whole of an iteration is returned by it
// (Redis' guarantee), however the table changes meanwhile.
//
// Thread safety: any thread; the entry functions need the key's stripe lock held (REQUIRES).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "common/keys.h"
#include "common/thread_annotations.h"

namespace kvtier::server {

class GenericKeys {
 public:
  static constexpr size_t kStripes = 64;
  static constexpr int kStripeShift = 58;  // 64 - log2(kStripes)

  struct Entry {
    std::string name;
    uint64_t expires_at_ms = 0;  // Unix time in milliseconds; 0: never expires
    bool ExpiredAt(uint64_t now_ms) const { return expires_at_ms != 0 && expires_at_ms <= now_ms; }
  };

  struct Stripe {
    Mutex lock;
    std::map<BlockKey, Entry> entries GUARDED_BY(lock);
  };

  Stripe& StripeOf(const BlockKey& key) { return stripes_[key.high >> kStripeShift]; }

  // The entry of `key`, or nullptr. The pointer is valid while the stripe lock is held and the
  // entry is not forgotten.
  Entry* Find(Stripe& stripe, const BlockKey& key) REQUIRES(stripe.lock);
  // Enters `key` with `name` and `expires_at_ms`, replacing what was there.
  void Record(Stripe& stripe, const BlockKey& key, std::string_view name, uint64_t expires_at_ms)
      REQUIRES(stripe.lock);
  // Drops `key`'s entry; false when it had none.
  bool Forget(Stripe& stripe, const BlockKey& key) REQUIRES(stripe.lock);

  // What Walk shows each entry, with its stripe locked. Returns false to drop the entry.
  using Visitor = std::function<bool(Stripe&, const BlockKey&, Entry&)>;
  // Visits entries in block-key order from `cursor` (0: the start) until about `budget` have been
  // visited; the entries of one 64-bit cursor value are never split between two calls. Locks one
  // stripe at a time. Returns the cursor to continue from, 0 when the walk reached the end.
  uint64_t Walk(uint64_t cursor, size_t budget, const Visitor& visit);

  // Entries in the table, stale ones included: an upper bound on the live keys.
  size_t size() const { return size_.load(std::memory_order_relaxed); }
  // Bytes of the entries' names: daemon memory that the host tier's capacity does not bound (a
  // name may be 64 KiB, its value one byte), so the server caps it (max_generic_name_bytes).
  size_t name_bytes() const { return name_bytes_.load(std::memory_order_relaxed); }

 private:
  std::array<Stripe, kStripes> stripes_;
  std::atomic<size_t> size_{0};
  std::atomic<size_t> name_bytes_{0};
};

// Whether `text` matches the glob `pattern` as Redis' KEYS and SCAN MATCH do: `*` any run, `?`
// any byte, `[abc]`, `[a-c]` and `[^a]` sets, and `\` taking the next byte literally.
bool GlobMatches(std::string_view pattern, std::string_view text);

// The current Unix time in milliseconds, the clock of expiry times.
uint64_t UnixNowMs();

}  // namespace kvtier::server
