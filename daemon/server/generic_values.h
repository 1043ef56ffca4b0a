// How the generic commands find, read and remove one key's value: the store's block together with
// the key's entry in GenericKeys (name and expiry). Shared by the value commands
// (commands_generic.cc: SET, GET, DEL, ...) and the key-space commands (commands_keyspace.cc:
// SCAN, TTL, EXPIRE, FLUSHDB, ...).
//
// Every function here runs under the key's stripe lock (ServerContext::GenericStripe), which the
// caller holds: that is what keeps a key's entry and its block in step. Handler threads only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "common/keys.h"
#include "common/status.h"
#include "daemon/server/commands.h"
#include "daemon/server/generic_keys.h"

namespace kvtier::server {

// One generic key as the commands handle it: its name, its block key and its stripe.
struct GenericKeyRef {
  std::string_view name;
  BlockKey block;
  GenericKeys::Stripe& stripe;
};

GenericKeyRef RefOf(ServerContext& server, std::string_view name);

// The entry of a live key (its value present, its time not up), or nullptr when the key does not
// exist now. On the way it settles what it finds: an expired value is removed (or, while a reader
// still leases it, left as an expired entry for the sweep to remove), an entry whose block the
// store evicted is dropped (unless the blocks found at a restart are still joining the index), and
// a value present without an entry (one from before a restart the key-names file did not cover)
// is entered, without an expiry. Does not touch the block's recency. `stored`, when given, is set
// to a live key's block: its size and the tier it is in.
GenericKeys::Entry* LiveEntry(ServerContext& server, const GenericKeyRef& key, uint64_t now_ms,
                              store::StoredSize* stored = nullptr) REQUIRES(key.stripe.lock);

// Removes the key's value and its entry. kBusy (both kept) while a reader leases the value;
// kNotFound when there was no value (the entry, if any, is dropped).
Status RemoveValue(ServerContext& server, const GenericKeyRef& key) REQUIRES(key.stripe.lock);

// Walks about `budget` entries from `cursor` (GenericKeys::Walk), settling each as LiveEntry
// does (expired values removed, stale entries dropped) and showing `on_live`, when given, each
// live one. Returns the cursor to go on from (0: the end). SCAN and KEYS list with it; the server
// sweeps with it on a timer, so that expired values free their space without being read.
uint64_t SettleKeys(ServerContext& server, uint64_t cursor, size_t budget,
                    const std::function<void(const GenericKeys::Entry&)>& on_live = {});

// The Unix time in milliseconds that an expiry argument names: `n` seconds or milliseconds, from
// `now_ms` or since the epoch (EXAT, PXAT, EXPIREAT). May lie in the past; a result of 0 or less
// is taken as "already past". nullopt when it does not fit in 64 bits (Redis: "invalid expire
// time").
std::optional<int64_t> ExpiryTime(int64_t n, bool seconds, bool absolute, uint64_t now_ms);

// True (after writing the error) when the key is longer than the server's max_key_bytes.
bool KeyTooLong(CommandContext& ctx, std::string_view key);

}  // namespace kvtier::server
