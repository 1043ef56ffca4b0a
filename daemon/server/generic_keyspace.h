// The generic key space: how the Redis-style commands (GET, SET, ...) map opaque byte-string keys
// and values onto the block store.
//
// The space is one built-in namespace, registered by the server at creation:
//   id  = XXH3-128 (seed 0) of the 14 ASCII bytes "kvtier-generic", as a NamespaceId
//   key = hashing::FoldForeignKey(id, key bytes)
//       = XXH3-128(id as 16 big-endian bytes || 0x03 || u32 LE key length || key bytes)
// so a generic key is hashed under its namespace like any engine hash (docs/hashing.md), and
// never equals a token block key. Its NamespaceInfo has block_bytes 0 (any size) and
// tokens_per_block 0.
//
// A value is stored as one block: a one-byte format tag (kGenericValueFormat) followed by the
// value's bytes. The tag gives the empty value (`SET k ""`) a non-empty block, which the store
// requires, and leaves room for a later format. KVT.* commands treat the generic namespace as
// unknown, so its blocks are only reachable, and only written, through the generic commands.
//
// Pure functions; any thread.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/keys.h"

namespace kvtier::server {

inline constexpr std::byte kGenericValueFormat{0x01};
inline constexpr size_t kGenericValueHeaderBytes = 1;

NamespaceId GenericNamespaceId();
BlockKey GenericKey(const NamespaceId& generic_ns, std::string_view key);

}  // namespace kvtier::server
