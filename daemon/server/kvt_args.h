// Arguments common to the KVT.* handlers: the namespace id and the packed keys, each parsed once
// with the error reply written on failure, and the per-connection cap on held ids.
//
// Called from handlers on the connection's strand.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/keys.h"
#include "daemon/server/commands.h"
#include "hashing/namespace_descriptor.h"

namespace kvtier::server {

// Reservations (and, separately, leases) one connection may hold at once. Each costs the session a
// set entry until the client commits, aborts or releases it, even after the store took it back at
// its deadline; the cap keeps a client that never finishes from growing the daemon without bound.
// Beyond it, RESERVE and ACQUIRE answer BUSY for the extra keys.
inline constexpr size_t kMaxHeldIdsPerConnection = size_t{1} << 20;

// The namespace of a KVT.* command.
struct KvtNamespace {
  NamespaceId id;
  // Registered, and not the generic namespace (which only the generic commands reach).
  bool known = false;
};

// Parses 32 hex digits; on failure writes `-ERR invalid namespace id` and returns nullopt.
std::optional<KvtNamespace> ParseKvtNamespace(CommandContext& ctx, std::string_view hex);

// Checks a packed-key argument (a multiple of 16 bytes, at most max_lookup_keys keys) and returns
// the number of keys; on failure writes the -ERR reply and returns nullopt.
std::optional<size_t> CheckPackedKeys(CommandContext& ctx, std::string_view packed);

// For a read of a prefix (KVT.GET, KVT.ACQUIRE) at its first wait for the mover: asks it for every
// block of keys [from, count) of `packed` that lies on NVMe at once (Store::PrefetchForRead), so
// that the read waits for its slowest block rather than for each in turn. Called only then, so a
// read whose blocks are all in memory builds no key list and looks nothing up twice.
void PrefetchRestOfPrefix(CommandContext& ctx, const NamespaceId& ns, std::string_view packed,
                          size_t from, size_t count);

// Key `i` of a packed-key argument that passed CheckPackedKeys.
BlockKey PackedKey(std::string_view packed, size_t i);
// Keys [from, count) of such an argument, as a list.
std::vector<BlockKey> PackedKeys(std::string_view packed, size_t from, size_t count);

// `-NOTFOUND namespace <hex> is not registered`.
void AppendUnknownNamespace(CommandContext& ctx, const NamespaceId& ns);

// True (after writing `-ERR <command> needs the Unix socket ...`) unless the connection is on the
// Unix socket: memory and descriptors are only shared with processes on the node.
bool RefuseOffTheUnixSocket(CommandContext& ctx, std::string_view command);

// True (after writing `-ERR <command> needs ...`) unless the connection can use the shared-memory
// path: a Unix socket, and a daemon with a host arena.
bool RefuseWithoutSharedMemory(CommandContext& ctx, std::string_view command);

// KVT.REGISTER, in kvt_register.cc.
Progress KvtRegister(CommandContext& ctx, resp::Command& cmd);

// The namespace descriptor of the field/value pairs cmd.args[first..] as KVT.REGISTER takes them
// (block_bytes is accepted and ignored), validated. kInvalidArgument naming the wire field.
Result<hashing::NamespaceDescriptor> ParseNamespaceFields(const resp::Command& cmd, size_t first);

// Every field of `desc` as (wire name, value), in KVT.REGISTER's order (store::NamespaceInfo).
std::vector<std::pair<std::string, std::string>> NamespaceFields(
    const hashing::NamespaceDescriptor& desc);

// KVT.EXPLAIN, in kvt_explain.cc.
Progress KvtExplain(CommandContext& ctx, resp::Command& cmd);

// KVT.QUOTA, in kvt_quota.cc.
Progress KvtQuota(CommandContext& ctx, resp::Command& cmd);

}  // namespace kvtier::server
