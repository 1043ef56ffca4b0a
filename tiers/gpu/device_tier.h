// DeviceTier: what the GPU tier offers beyond tiers::Tier, shared by the real CUDA pool (GpuTier)
// and its host-memory stand-in (FakeGpuTier), and the options both are built from.
//
// A device tier is one fixed pool of device memory carved into block slots by a SlabAllocator.
// Its bytes are not host-addressable: Address() is nullptr for both implementations, so the store
// moves them with Read/Write (host <-> device copies that run at DMA speed when the host buffer
// is pinned, see common/cuda/pinned_host_range.h) and code tested against the fake takes the same
// paths as on a GPU. DevicePointer() gives an extent's address in the device's address space, for
// device-to-device copies. ExportForClients() describes the whole pool for clients on the node
// (KVT.GPUATTACH, docs/protocol.md): they map it once and read a leased block at their own base
// plus the extent's offset.
//
// Thread safety: as tiers::Tier; every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tiers/gpu/slab_pool.h"
#include "tiers/slab_allocator.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

struct GpuTierOptions {
  // false: no GPU tier ("disabled in config"), whatever the machine has.
  bool enabled = true;
  // true: a FakeGpuTier in host memory instead of a device pool (tests, CPU-only demos).
  bool fake = false;
  int device = 0;  // CUDA device ordinal
  // Pool size. 0 sizes it from the device when the tier is created: an eighth of its memory, at
  // most half of its free memory (the engine sharing the GPU needs the rest). Required (> 0) for
  // the fake.
  uint64_t capacity_bytes = 0;
  uint64_t slab_bytes = SlabAllocator::Options{}.slab_bytes;
  uint64_t alignment = SlabAllocator::Options{}.alignment;
  // Copy lanes: each is a CUDA stream used by one Read/Write at a time, so up to this many
  // copies run at once (PCIe has one DMA engine per direction; 4 keeps both busy).
  uint32_t copy_lanes = 4;
};

class DeviceTier : public Tier {
 public:
  TierId id() const final { return TierId::kGpu; }
  // Device memory is not host-addressable, in the fake too (see above).
  std::byte* Address(const Extent& extent) final { return nullptr; }

  // The device address of the extent's first byte (the fake: its host address), or nullptr when
  // the extent does not lie inside the pool.
  virtual void* DevicePointer(const Extent& extent) = 0;
  // The CUDA device ordinal of the pool; -1 for the fake.
  virtual int device() const = 0;
  // Start of the pool in the device's address space and its size in bytes.
  virtual void* pool_base() const = 0;
  virtual uint64_t pool_bytes() const = 0;
  // The whole pool, exported for other processes on the node (Tier::ExportForClients). What a
  // client mapped stays valid while the tier lives (the daemon keeps it until it exits; a client
  // that exits or dies only loses its own mapping). Errors: GpuTier's CudaStatus codes of the IPC
  // export (kDeviceError and the like); the caller reports them and carries on without sharing
  // the pool.
  Result<PoolExport> ExportForClients() override = 0;
  // Invalid frees (double, unknown or wrong length): counted, otherwise ignored.
  uint64_t invalid_free_count() const { return pool_.invalid_free_count(); }

  // Slot bookkeeping is the same for the device pool and the fake: both carve one pool with it.
  Result<Extent> Allocate(uint64_t bytes) final { return pool_.Allocate(bytes); }
  void Free(const Extent& extent) final { pool_.Free(extent); }
  TierStats Stats() const final { return pool_.Stats(); }
  uint64_t FootprintOf(uint64_t bytes) const final { return pool_.FootprintOf(bytes); }
  Extent ReclaimUnit(const Extent& victim, uint64_t /*room_bytes*/) const final {
    return pool_.ReclaimUnit(victim);
  }

 protected:
  explicit DeviceTier(SlabAllocator allocator) : pool_(std::move(allocator)) {}

 private:
  SlabPool pool_;
};

}  // namespace kvtier::tiers
