// Values for the remote client tests: records of distinct payloads under distinct block keys, and
// keys chosen to land in every hash slot. Pure helpers; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/keys.h"
#include "tiers/remote/cluster_slots.h"
#include "tiers/remote/remote_record.h"

namespace kvtier::tiers::remote::testing {

inline NamespaceId TestNamespace() {
  NamespaceId ns;
  ns.high = 0x6b76746965722d74;
  ns.low = 0x6573742d6e730001;
  return ns;
}

inline BlockKey TestBlock(uint64_t i) {
  BlockKey key;
  key.high = i * 0x9E3779B97F4A7C15ULL + 1;
  key.low = i;
  return key;
}

// `bytes` of payload that differ for every block index.
inline std::vector<std::byte> TestPayload(uint64_t i, size_t bytes) {
  std::vector<std::byte> p(bytes);
  uint64_t x = i * 0x2545F4914F6CDD1DULL + 7;
  for (size_t b = 0; b < bytes; ++b) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[b] = static_cast<std::byte>(x);
  }
  return p;
}

// The key under which TestBlock(i) is stored.
inline std::string TestKey(uint64_t i) { return RemoteKey(TestNamespace(), TestBlock(i)); }

inline std::string TestRecord(uint64_t i, size_t bytes) {
  return EncodeRecord(TestNamespace(), TestBlock(i), TestPayload(i, bytes));
}

// Block indices whose RemoteKey covers every one of the 16384 slots, one index per slot.
inline std::vector<uint64_t> BlocksCoveringEverySlot() {
  std::vector<uint64_t> by_slot(kSlotCount, UINT64_MAX);
  size_t covered = 0;
  for (uint64_t i = 0; covered < by_slot.size(); ++i) {
    uint64_t& slot = by_slot[KeySlot(TestKey(i))];
    if (slot == UINT64_MAX) {
      slot = i;
      ++covered;
    }
  }
  return by_slot;
}

}  // namespace kvtier::tiers::remote::testing
