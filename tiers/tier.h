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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/keys.h"
#include "common/status.h"
#include "common/types.h"

namespace kvtier::tiers {

// Which block an extent holds. Durable tiers record it with the bytes, so that a block read back
// can be checked against the key it is read for, and a restart can tell what is where.
struct BlockIdentity {
  NamespaceId ns;
  BlockKey key;
  bool operator==(const BlockIdentity&) const = default;
};

// One block of a Tier::WriteBlocks / ReadBlocks batch.
struct BlockWrite {
  Extent extent;
  BlockIdentity identity;
  std::span<const std::byte> src;
  Status status;  // set by WriteBlocks
  // A copy the caller acknowledges as surviving a restart (a write-through copy): a device tier
  // that cannot make it so (NVMe: its catalog refused the record) fails it rather than keep it.
  // Other blocks are kept, served until the restart.
  bool must_survive_restart = false;
};
struct BlockRead {
  Extent extent;
  BlockIdentity identity;
  std::span<std::byte> dst;
  Status status;  // set by ReadBlocks
};

struct TierStats {
  uint64_t capacity_bytes = 0;  // bytes the tier may hand out in total
  uint64_t used_bytes = 0;      // bytes of the extents handed out (as requested by callers)
  uint64_t reserved_bytes = 0;  // bytes the allocator has set aside for them (>= used_bytes)
  uint64_t block_count = 0;     // extents handed out and not yet freed
  // 1 - used / reserved: the share of set-aside space that holds no block bytes (slot rounding
  // and empty slots in partly used slabs). 0 when nothing is reserved.
  double fragmentation = 0.0;

  // Room not set aside: what one allocation could get at most (in one hole or not).
  uint64_t free_bytes() const { return capacity_bytes - std::min(capacity_bytes, reserved_bytes); }
};

// How a client on the node maps a tier's memory, so that it reads leased blocks (and writes
// reserved ones) at its own base plus the extent's offset.
enum class PoolExportKind : uint8_t {
  kCudaIpc,  // GpuTier: ipc_handle holds cuda::IpcExport's bytes, opened with cuda::IpcImport
  kMemfd,    // the host arena, FakeGpuTier: fd is a memfd of the tier's memory, mmap(MAP_SHARED)
};

// What Tier::ExportForClients() hands out.
struct PoolExport {
  PoolExportKind kind = PoolExportKind::kMemfd;
  uint64_t pool_bytes = 0;
  int device = -1;         // the CUDA device ordinal; -1 for host memory and the fake
  std::string ipc_handle;  // kCudaIpc only: cuda::kIpcHandleBytes bytes
  int fd = -1;             // kMemfd only: borrowed; the tier owns it and keeps it open
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

  // Write and Read with the block's identity: what the store calls. Tiers that keep blocks on a
  // device (NVMe) store the identity and a checksum with the bytes and verify both on the way
  // back: ReadBlock answers kChecksumMismatch (the caller drops the block, a miss) rather than
  // return bytes that are not the block's. Memory tiers ignore the identity.
  virtual Status WriteBlock(const Extent& extent, const BlockIdentity& identity,
                            std::span<const std::byte> src) {
    (void)identity;
    return Write(extent, src);
  }
  virtual Status ReadBlock(const Extent& extent, const BlockIdentity& identity,
                           std::span<std::byte> dst) {
    (void)identity;
    return Read(extent, dst);
  }

  // Several blocks at once: what the mover calls to keep a device's queue full. Each element's
  // `status` is set as WriteBlock/ReadBlock would set it; one block's failure does not stop the
  // others, and the calls return when every block is done. A device tier submits the whole batch
  // together (NVMe: one io_uring batch); the default moves one block at a time. The extents must
  // be distinct, and the buffers stay valid until the call returns.
  virtual void WriteBlocks(std::span<BlockWrite> writes) {
    for (BlockWrite& w : writes) w.status = WriteBlock(w.extent, w.identity, w.src);
  }
  virtual void ReadBlocks(std::span<BlockRead> reads) {
    for (BlockRead& r : reads) r.status = ReadBlock(r.extent, r.identity, r.dst);
  }

  // The bytes of `extent` in this process's address space, for tiers that are plain memory (the
  // host arena, or a HostTier standing in for another tier); nullptr for tiers that are not (NVMe,
  // the GPU pool, and FakeGpuTier, which behaves like the pool: tiers/gpu/device_tier.h).
  virtual std::byte* Address(const Extent& extent) { return nullptr; }

  // The tier's whole memory, exported for clients on the node (the shared-memory path: the host
  // arena for KVT.ATTACH, the GPU pool for KVT.GPUATTACH). Made on first use and kept for the
  // tier's lifetime: every call returns the same export. kRejected for tiers that cannot be
  // mapped by another process (NVMe); an export's own errors otherwise (a CUDA IPC failure).
  virtual Result<PoolExport> ExportForClients() {
    return Status(StatusCode::kRejected, "this tier cannot be mapped by clients");
  }

  // The range the store empties (it evicts every block that starts inside it) when evicting
  // least-recently-used blocks one by one cannot make room for a block of `room_bytes` payload
  // bytes: for slab allocators the slab (or run of slabs) containing `victim`, given back as a
  // whole once its blocks are gone; for the NVMe tier, whose free space merges freely, the block's
  // footprint from the victim on (tiers/room_window.h). The default: `victim` itself.
  virtual Extent ReclaimUnit(const Extent& victim, uint64_t room_bytes) const { return victim; }

  // The blocks whose extents start inside `range` (a ReclaimUnit), for a tier that knows which
  // block each extent holds (the NVMe tier: its catalog entries); nullopt for one that does not,
  // and the store then scans its index for them.
  virtual std::optional<std::vector<BlockIdentity>> BlocksStartingIn(const Extent& range) const {
    return std::nullopt;
  }

  // The bytes of this tier's space that a block of `bytes` payload bytes takes (the NVMe tier adds
  // its record header and rounds to its alignment): what a caller that plans room must count.
  virtual uint64_t FootprintOf(uint64_t bytes) const { return bytes; }

  // Records that the block at `extent` was just used, for a tier that keeps recency across a
  // restart (the NVMe tier's catalog); a no-op for the others. Best effort: nothing to report.
  virtual void RecordUse(const Extent& extent) {}

  // The block at `extent`, written as cache (BlockWrite::must_survive_restart false), is now
  // acknowledged as durable: from here on the tier treats it as written with must_survive_restart
  // (the NVMe tier: synced on the acknowledged blocks' schedule). Asked of a write-through put
  // whose block was demoted before its own copy was made. Errors: kNotFound when no block is at
  // `extent`; kDeviceError when a restart would not find it (its record could not be written).
  // Tiers that keep nothing across a restart have nothing to do.
  virtual Status MustSurviveRestart(const Extent& extent) { return Status::Ok(); }

  // Key `key` of `ns` was removed or written again, or with no key the namespace `ns` was
  // dropped: a tier that found blocks at start-up which the store has not adopted yet (the NVMe
  // tier) frees those of the key (of the namespace), so that none comes back at a later restart.
  // A no-op for the others.
  virtual void DropRecoveredCopies(const NamespaceId& ns, const std::optional<BlockKey>& key) {}

  virtual TierStats Stats() const = 0;

  // Device counters beyond TierStats (NVMe: reads, bytes written to the device, checksum
  // failures, ...), one visit(name, value) each with a stable snake_case name; none by default.
  // The store copies them into its statistics, so /metrics, /stats and INFO show them.
  virtual void VisitDeviceStats(
      const std::function<void(std::string_view name, double value)>& visit) const {
    (void)visit;
  }
};

}  // namespace kvtier::tiers
