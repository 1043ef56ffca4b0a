#include "daemon/server/generic_values.h"

#include <span>

#include "daemon/server/generic_keyspace.h"
#include "daemon/store/store.h"

namespace kvtier::server {

GenericKeyRef RefOf(ServerContext& server, std::string_view name) {
  const BlockKey block = GenericKey(server.generic_ns, name);
  return GenericKeyRef{name, block, server.GenericStripe(block)};
}

namespace {

// While the blocks found on NVMe at a restart join the index, an entry whose block is not there
// yet (loaded from the key-names file) is kept: its block may still come.
bool Adopting(ServerContext& server) { return server.store.pending_adoptions() > 0; }

// What a key's entry and block say together, under the key's lock. An expired value is removed;
// an entry is kept (`keep`) while its key lives, while an expired value is still leased by a
// reader (the sweep removes it later), and, while the blocks found at a restart join the index,
// when its block is not there yet: an expired one may still come and must go then, a live one may
// still come and must keep its name and expiry.
struct Settled {
  bool live = false;
  bool keep = false;
  store::StoredSize stored;  // when live
};

Settled Settle(ServerContext& server, const BlockKey& block, const GenericKeys::Entry* entry,
               uint64_t now_ms) {
  if (entry != nullptr && entry->ExpiredAt(now_ms)) {
    const StatusCode removed = server.store.Remove(server.generic_ns, block).code();
    return {.keep = removed == StatusCode::kBusy ||
                    (removed == StatusCode::kNotFound && Adopting(server))};
  }
  const std::optional<store::StoredSize> stored = server.store.SizeOf(server.generic_ns, block);
  if (!stored) return {.keep = entry != nullptr && Adopting(server)};
  return {.live = true, .keep = true, .stored = *stored};
}

}  // namespace

GenericKeys::Entry* LiveEntry(ServerContext& server, const GenericKeyRef& key, uint64_t now_ms,
                              store::StoredSize* stored) {
  GenericKeys& keys = server.generic_keys;
  GenericKeys::Entry* entry = keys.Find(key.stripe, key.block);
  const Settled s = Settle(server, key.block, entry, now_ms);
  if (entry != nullptr && !s.keep) keys.Forget(key.stripe, key.block);
  if (!s.live) return nullptr;
  if (entry == nullptr) {
    keys.Record(key.stripe, key.block, key.name, 0);
    entry = keys.Find(key.stripe, key.block);
  }
  if (stored != nullptr) *stored = s.stored;
  return entry;
}

Status RemoveValue(ServerContext& server, const GenericKeyRef& key) {
  const Status removed = server.store.Remove(server.generic_ns, key.block);
  if (removed.code() != StatusCode::kBusy) server.generic_keys.Forget(key.stripe, key.block);
  return removed;
}

uint64_t SettleKeys(ServerContext& server, uint64_t cursor, size_t budget,
                    const std::function<void(const GenericKeys::Entry&)>& on_live) {
  const uint64_t now_ms = UnixNowMs();
  return server.generic_keys.Walk(
      cursor, budget, [&](GenericKeys::Stripe&, const BlockKey& block, GenericKeys::Entry& entry) {
        const Settled s = Settle(server, block, &entry, now_ms);
        if (s.live && on_live) on_live(entry);
        return s.keep;
      });
}

std::optional<int64_t> ExpiryTime(int64_t n, bool seconds, bool absolute, uint64_t now_ms) {
  int64_t ms = n;
  if (seconds && __builtin_mul_overflow(n, int64_t{1000}, &ms)) return std::nullopt;
  if (absolute) return ms;
  int64_t at = 0;
  if (__builtin_add_overflow(ms, static_cast<int64_t>(now_ms), &at)) return std::nullopt;
  return at;
}

bool KeyTooLong(CommandContext& ctx, std::string_view key) {
  if (key.size() <= ctx.server.options.max_key_bytes) return false;
  ctx.reply.AppendError("ERR key too long");
  return true;
}

}  // namespace kvtier::server
