#include "daemon/server/generic_keyspace.h"

#include <xxhash.h>

#include <span>

#include "hashing/block_hasher.h"

namespace kvtier::server {

NamespaceId GenericNamespaceId() {
  constexpr std::string_view kName = "kvtier-generic";
  const XXH128_hash_t h = XXH3_128bits(kName.data(), kName.size());
  NamespaceId id;
  id.high = h.high64;
  id.low = h.low64;
  return id;
}

BlockKey GenericKey(const NamespaceId& generic_ns, std::string_view key) {
  return hashing::FoldForeignKey(generic_ns, std::as_bytes(std::span(key.data(), key.size())));
}

}  // namespace kvtier::server
