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

std::optional<TierId> Where(ServerContext& server, const BlockKey& block) {
  return server.store.Where(server.generic_ns, std::span(&block, 1))[0];
}

// While the blocks found on NVMe at a restart join the index, an entry whose block is not there
// yet (loaded from the key-names file) is kept: its block may still come.
bool Adopting(ServerContext& server) { return server.store.pending_adoptions() > 0; }

}  // namespace

GenericKeys::Entry* LiveEntry(ServerContext& server, const GenericKeyRef& key, uint64_t now_ms,
                              TierId* tier) {
  GenericKeys& keys = server.generic_keys;
  GenericKeys::Entry* entry = keys.Find(key.stripe, key.block);
  if (entry != nullptr && entry->ExpiredAt(now_ms)) {
    (void)RemoveValue(server, key);  // kBusy: the expired entry stays, and the key is gone anyway
    return nullptr;
  }
  const std::optional<TierId> where = Where(server, key.block);
  if (!where) {
    if (entry != nullptr && !Adopting(server)) keys.Forget(key.stripe, key.block);
    return nullptr;
  }
  if (tier != nullptr) *tier = *where;
  if (entry == nullptr) {
    keys.Record(key.stripe, key.block, key.name, 0);
    entry = keys.Find(key.stripe, key.block);
  }
  return entry;
}

Status RemoveValue(ServerContext& server, const GenericKeyRef& key) {
  const Status removed = server.store.Remove(server.generic_ns, key.block);
  if (removed.code() != StatusCode::kBusy) server.generic_keys.Forget(key.stripe, key.block);
  return removed;
}

bool SettleVisited(ServerContext& server, const BlockKey& block, const GenericKeys::Entry& entry,
                   uint64_t now_ms, bool& live) {
  live = false;
  if (entry.ExpiredAt(now_ms)) {
    return server.store.Remove(server.generic_ns, block).code() == StatusCode::kBusy;
  }
  live = Where(server, block).has_value();
  return live || Adopting(server);
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
