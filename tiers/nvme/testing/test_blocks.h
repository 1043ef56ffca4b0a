// Blocks for the NVMe tier's tests: an identity per number, and payload bytes that are a function
// of the number, so that a block read back can be checked without keeping a copy.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>

#include "tiers/tier.h"

namespace kvtier::tiers::nvme::testing {

inline BlockIdentity TestBlockId(uint64_t i) { return {NamespaceId{{7, 7}}, BlockKey{{i, ~i}}}; }

// Deterministic payload bytes of block i.
inline void FillTestBlock(std::span<std::byte> out, uint64_t i) {
  std::mt19937_64 rng(i * 1000003 + 1);
  for (size_t k = 0; k < out.size(); k += 8) {
    uint64_t v = rng();
    std::memcpy(out.data() + k, &v, std::min<size_t>(8, out.size() - k));
  }
}

}  // namespace kvtier::tiers::nvme::testing
