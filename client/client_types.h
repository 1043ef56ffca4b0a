// Plain value types of the libkvtier API: what the Client's calls take and return.
//
// Segments describe caller memory: a block is a list of {pointer, length} segments (one per layer,
// or K and V per layer, in the engine's paged KV memory) whose lengths add up to the namespace's
// block size; the client gathers them into, or scatters them out of, one contiguous block. The
// memory is borrowed for the duration of the call (for an async call, until its future is ready).
// Values only; no synchronisation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "client/unique_fd.h"
#include "common/keys.h"
#include "common/status.h"
#include "common/types.h"

namespace kvtier::client {

// A registered namespace: its id (computed identically by the client and the daemon) and the
// payload size of each of its blocks.
struct NamespaceInfo {
  NamespaceId id;
  uint64_t block_bytes = 0;
  uint32_t tokens_per_block = 0;  // from the descriptor; what HashTokens() chains by
};

// The answer of Lookup: the number of leading keys cached, and the tier of each of them.
struct LookupResult {
  size_t prefix = 0;
  std::vector<TierId> tiers;  // tiers.size() == prefix
};

// One slice of a block in caller memory, read by Put.
struct ConstSegment {
  const void* data = nullptr;
  size_t bytes = 0;
};

// One slice of a block in caller memory, written by Get.
struct MutableSegment {
  void* data = nullptr;
  size_t bytes = 0;
};

// A block as a scatter/gather list.
using ConstBlock = std::span<const ConstSegment>;
using MutableBlock = std::span<const MutableSegment>;

// What KVT.ATTACH reported, and where the arena is mapped in this process.
struct ArenaInfo {
  uint64_t arena_bytes = 0;
  std::string tier;  // "host"
};

// What KVT.GPUATTACH handed out: how to map the daemon's GPU pool. client/gpu/gpu_pool_import.h
// maps it; a Client only receives it.
struct GpuPoolExport {
  std::string kind;  // "cuda-ipc" (handle is a CUDA IPC export) or "memfd" (fd is the pool)
  uint64_t pool_bytes = 0;
  int device = -1;     // CUDA device ordinal of the pool; -1 for a fake pool
  std::string handle;  // cuda-ipc only
  UniqueFd fd;         // memfd only
};

// A reserved slot (KVT.RESERVE) or a leased block (KVT.ACQUIRE). status is OK when granted; then
// `id` names the reservation or lease and [offset, offset + length) is its place in `tier`'s
// mapping: the host arena, or (a lease on a connection that attached the GPU pool) the GPU pool.
struct SlotGrant {
  Status status;
  uint64_t id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;  // leases only; reservations are block_bytes long
  TierId tier = TierId::kHost;
};

// The copy step of Client::PutWith / GetWith, for caller memory that the client cannot reach with
// memcpy (device memory; client/gpu/device_transfer.h). The client calls Start once per block it
// may copy, with the block's index in the call and its arena slot, then Wait once; it commits
// (or releases) only after Wait returned OK, so a copy may be asynchronous until then. For a put
// the slot is the destination; for a get it is the source and must not be written. Start's
// error fails that block alone (its reservation is aborted, or the get ends before it); Wait's
// error fails every block started since the previous Wait. A Start that fails may still have
// queued part of its work (a staging copy before a kernel launch that failed), so once any Start
// was called the client calls Wait before it aborts, commits or releases anything.
//
// A get may also be served out of the daemon's GPU pool: a copier that has the pool mapped says so
// with reads_gpu_pool(), and the client hands it the leases in the pool with StartFromGpuPool
// instead of Start. With any other copier such leases are released and their blocks read inline.
class SlotCopier {
 public:
  virtual ~SlotCopier() = default;
  virtual Status Start(size_t index, std::span<std::byte> slot) = 0;
  virtual Status Wait() = 0;
  virtual bool reads_gpu_pool() const { return false; }
  // Block `index` lies at [offset, offset + length) of the GPU pool. Called only when
  // reads_gpu_pool(); errors as Start's.
  virtual Status StartFromGpuPool(size_t index, uint64_t offset, uint64_t length) {
    return Rejected("this copier does not read the GPU pool");
  }
};

// Counters a Client keeps about its own calls, for `kvtier bench` and `kvtier replay`.
struct ClientCounters {
  uint64_t round_trips = 0;   // batches sent and answered
  uint64_t commands = 0;      // commands sent
  uint64_t torn_reads = 0;    // shm copies discarded because their lease had expired
  uint64_t aborted_puts = 0;  // reservations given back after a failed copy
};

}  // namespace kvtier::client
