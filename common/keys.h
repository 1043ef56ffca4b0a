// BlockKey and NamespaceId: the 128-bit names of KV blocks and of the namespaces they live in.
//
// These are plain values. How they are computed (XXH3-128, chained over the token prefix) lives in
// hashing/; they are defined here so that tiers and the index can carry them without depending on
// the hash function. Two distinct types keep a namespace id from being passed where a block key is
// meant.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier {

// A 128-bit value printed as 32 lower-case hex digits, high half first.
struct Key128 {
  uint64_t high = 0;
  uint64_t low = 0;

  auto operator<=>(const Key128&) const = default;
  std::string ToHex() const;
  // Parses exactly 32 hex digits (either case); nullopt otherwise.
  static std::optional<Key128> FromHex(std::string_view hex);
  // Big-endian bytes, high half first: the canonical byte form used on the wire and on disk.
  void ToBytes(std::byte out[16]) const;
  static Key128 FromBytes(const std::byte in[16]);
};

// The name of one full block of tokens together with its whole prefix and namespace.
struct BlockKey : Key128 {
  auto operator<=>(const BlockKey&) const = default;
};

// The hash of a namespace descriptor (model, KV layout, tenant, ...).
struct NamespaceId : Key128 {
  auto operator<=>(const NamespaceId&) const = default;
};

// Hash functor for unordered containers. The keys are already uniform hashes, so mixing the halves
// is enough; no second hash pass is spent.
struct Key128Hash {
  size_t operator()(const Key128& k) const noexcept {
    return static_cast<size_t>(k.low ^ (k.high * 0x9E3779B97F4A7C15ULL));
  }
};

}  // namespace kvtier
