// Small domain types shared by the tiers, the index and the store.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvtier {

// The storage tiers, hottest first. The numeric order is the demotion order: a block evicted from
// tier t moves to tier t+1 (or is dropped after the last one). kRemote is the store a fleet
// shares (docs/scale-out.md): never a tier of the store's chain, where blocks are indexed, but
// where lookups find blocks past the local tiers and the hits they count.
enum class TierId : uint8_t { kGpu = 0, kHost = 1, kNvme = 2, kRemote = 3 };
inline constexpr int kTierCount = 4;

// "gpu", "host", "nvme", "remote".
std::string_view TierName(TierId tier);
// The tier TierName names `name` (exactly, lower case); nullopt for any other text.
std::optional<TierId> TierFromName(std::string_view name);

// A byte range inside one tier's address space (arena offset, file offset or device offset).
struct Extent {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const Extent&) const = default;
};

}  // namespace kvtier
