// Tier: one level of block storage (GPU pool, host arena, NVMe), as the store sees it.
//
// A tier owns a fixed byte capacity and hands out extents for whole blocks. It knows nothing of
// keys, namespaces, leases or eviction order: those belong to the index and the store, which call
// Allocate when a block is placed in the tier and Free when it leaves. Tiers never evict on their
// own; Allocate answers kBusy and the store decides what to evict (or demote to the next tier).
//
// Thread safety: every method may be called from any thread; implementations synchronise their own
// allocator. Bytes inside an extent are only touched by whoever holds that extent (the store
// guarantees one writer and no readers while a block is being written).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/keys.h"
#include "common/status.h"
#include "common/types.h"

namespace kvtier::tiers {

struct TierStats {
  uint64_t capacity_bytes = 0;   // bytes the tier may hand out in total
  uint64_t used_bytes = 0;       // bytes of the extents handed out (as requested by callers)
  uint64_t reserved_bytes = 0;   // bytes the allocator has set aside for them (>= used_bytes)
  uint64_t block_count = 0;      // extents handed out and not yet freed
  // 1 - used / reserved: the share of set-aside space that holds no block bytes (slot rounding
  // and empty slots in partly used slabs). 0 when nothing is reserved.
  double fragmentation = 0.0;
};

// The name of the block an extent holds, for tiers that store it beside the bytes (NVMe: in the
// on-disk record header and the durable catalog) and check it when the block is read back.
struct BlockIdentity {
  NamespaceId ns;
  BlockKey key;
  bool operator==(const BlockIdentity&) const = default;
};

class Tier {
 public:
  virtual ~Tier() = default;

  virtual TierId id() const = 0;

  // Sets aside room for one block of `bytes`. Errors: kInvalidArgument for 0 bytes; kRejected
  // when `bytes` can never fit in this tier (larger than its capacity or its largest slot);
  // kBusy when there is no room right now (the caller evicts something and retries).
  virtual Result<Extent> Allocate(uint64_t bytes) = 0;

  // Returns an extent obtained from Allocate. Freeing an extent twice or one never handed out is a
  // bug; implementations detect it where they cheaply can.
  virtual void Free(const Extent& extent) = 0;

  // Copies `src` into the start of `extent` (src.size() <= extent.length). kDeviceError on I/O
  // failure.
  virtual Status Write(const Extent& extent, std::span<const std::byte> src) = 0;

  // Copies the first dst.size() bytes of `extent` into `dst`. kDeviceError on I/O failure.
  virtual Status Read(const Extent& extent, std::span<std::byte> dst) = 0;

  // Write and Read for a named block. Tiers that keep blocks across restarts or verify them (NVMe)
  // record `id` with the bytes and, on ReadBlock, check that the extent still holds that block with
  // intact bytes: kChecksumMismatch otherwise (the caller treats it as a miss and frees the extent;
  // dst's contents are then unspecified). Other tiers ignore `id`: these default to Write and Read.
  virtual Status WriteBlock(const Extent& extent, const BlockIdentity& id,
                            std::span<const std::byte> src) {
    return Write(extent, src);
  }
  virtual Status ReadBlock(const Extent& extent, const BlockIdentity& id,
                           std::span<std::byte> dst) {
    return Read(extent, dst);
  }

  // The bytes of `extent` in this process's address space, for tiers that are plain memory (host
  // arena, fake GPU tier); nullptr for tiers that are not (NVMe, a real GPU pool).
  virtual std::byte* Address(const Extent& extent) { return nullptr; }

  // The range of this tier's space that is given back as a whole once every block in it is freed
  // (a slab, for slab allocators), containing `extent`. The store evicts every block in that range
  // when evicting least-recently-used blocks one by one cannot make room for a block of another
  // size. Tiers whose allocator merges free space freely return `extent` itself.
  virtual Extent ReclaimUnit(const Extent& extent) const { return extent; }

  virtual TierStats Stats() const = 0;
};

}  // namespace kvtier::tiers
