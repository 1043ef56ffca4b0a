#include "daemon/server/kvt_args.h"

#include <string>
#include <vector>

#include "daemon/server/wire.h"
#include "daemon/store/store.h"

namespace kvtier::server {

std::optional<KvtNamespace> ParseKvtNamespace(CommandContext& ctx, std::string_view hex) {
  std::optional<NamespaceId> id = ParseNamespaceId(hex);
  if (!id) {
    ctx.reply.AppendError("ERR invalid namespace id: expected 32 hex digits");
    return std::nullopt;
  }
  KvtNamespace ns{*id, false};
  ns.known = *id != ctx.server.generic_ns && ctx.server.store.GetNamespace(*id).has_value();
  return ns;
}

std::optional<size_t> CheckPackedKeys(CommandContext& ctx, std::string_view packed) {
  if (packed.size() % 16 != 0) {
    ctx.reply.AppendError("ERR packed keys must be a multiple of 16 bytes, got " +
                          std::to_string(packed.size()));
    return std::nullopt;
  }
  if (packed.size() / 16 > ctx.server.options.max_lookup_keys) {
    ctx.reply.AppendError("ERR too many keys");
    return std::nullopt;
  }
  return packed.size() / 16;
}

BlockKey PackedKey(std::string_view packed, size_t i) {
  const Key128 k = Key128::FromBytes(reinterpret_cast<const std::byte*>(packed.data()) + 16 * i);
  BlockKey key;
  key.high = k.high;
  key.low = k.low;
  return key;
}

std::vector<BlockKey> PackedKeys(std::string_view packed, size_t from, size_t count) {
  std::vector<BlockKey> keys;
  keys.reserve(count > from ? count - from : 0);
  for (size_t i = from; i < count; ++i) keys.push_back(PackedKey(packed, i));
  return keys;
}

void PrefetchRestOfPrefix(CommandContext& ctx, const NamespaceId& ns, std::string_view packed,
                          size_t from, size_t count) {
  if (from >= count) return;
  ctx.server.store.PrefetchForRead(ns, PackedKeys(packed, from, count));
}

void AppendUnknownNamespace(CommandContext& ctx, const NamespaceId& ns) {
  ctx.reply.AppendError("NOTFOUND namespace " + ns.ToHex() + " is not registered");
}

bool RefuseOffTheUnixSocket(CommandContext& ctx, std::string_view command) {
  if (ctx.session.transport() == Transport::kUnix) return false;
  ctx.reply.AppendError("ERR " + std::string(command) +
                        " needs the Unix socket: shared memory is local to the node");
  return true;
}

bool RefuseWithoutSharedMemory(CommandContext& ctx, std::string_view command) {
  if (RefuseOffTheUnixSocket(ctx, command)) return true;
  if (!ctx.server.arena) {
    ctx.reply.AppendError("ERR " + std::string(command) +
                          " needs a host arena, and this daemon runs without one");
    return true;
  }
  return false;
}

}  // namespace kvtier::server
