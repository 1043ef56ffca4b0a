// GPU forms of the client's shared-memory Put and Get: blocks move between an inference engine's
// GPU memory and the daemon's host-arena slots with a DeviceCopier, one copy each way, no
// staging through the socket.
//
//   PutFromDevice / GetToDevice   each block is one contiguous device buffer of block_bytes.
//   PutFromPaged / GetToPaged     each block is block_ids[i] of a paged KV layout: gathered into
//                                 its slot (put) or scattered out of it (get) by the copier's
//                                 kernel, all blocks of a call as one batch (one launch per
//                                 kKernelMaxBatch blocks: paged_batch.h).
//
// They run Client::PutWith / GetWith (client.h): RESERVE or ACQUIRE, queue one copy per granted
// block, wait for all of them, then COMMIT or RELEASE; per-key results and errors are those of
// Client::Put and Client::Get (a failed device copy gives its key the copier's error on a put,
// and ends the served prefix on a get).
//
// Ordering with the engine's own CUDA work (`caller`, device_copier.h's CallerStream): before any
// copy, the copier's stream waits on the device for the work queued so far on the caller's stream
// (or for the caller's event), so a put stores what the engine's kernels wrote and a get does not
// overwrite memory the engine's queued kernels still use. Pass the stream the engine writes (put)
// or will read (get) the memory on; the default is the legacy default stream, which orders
// nothing queued on a non-blocking stream. Each call returns only after its copies are complete
// (the client waits for them before it commits or releases), so whatever the caller queues
// afterwards, on any stream, sees the bytes of a get and may overwrite the memory of a put.
//
// Gets given the daemon's GPU pool (`pool`, from AttachGpuPool: gpu_pool_import.h) copy the
// blocks that live in it device-to-device, straight from the import (base + the lease's offset)
// into the engine's memory: cudaMemcpyAsync DeviceToDevice, or the paged scatter kernel reading
// the pool; host-arena blocks take the host-to-device path above, and what neither mapping holds
// (NVMe, or GPU blocks when no pool is given) is read inline into host memory and copied to the
// device from there. The pool is on the daemon's GPU; it is opened on the copier's device (pass
// copier.device() to AttachGpuPool), and when that is another GPU it is read over peer access
// (NVLink or PCIe), which CUDA IPC enables on import. Puts always go through the
// arena: the daemon moves blocks into its pool itself.
//
// For DMA-speed copies pin the client's mapping of the arena once after Client::Attach(), keep
// the returned range alive while the mapping is used, and drop it before re-attaching:
//   Result<ArenaInfo> info = client.Attach();
//   cuda::PinnedHostRange pinned = PinArena(client);  // best effort; pinned.status() says why not
//   Result<GpuPoolImport> pool = AttachGpuPool(client, copier.device());  // optional; error:
//                                                                          // GPU blocks go inline
//   GetToDevice(client, copier, ns, keys, blocks, block_bytes, pool.ok() ? &*pool : nullptr);
//
// Thread safety: as Client and DeviceCopier: neither is shared between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "client/client.h"
#include "client/gpu/device_copier.h"
#include "client/gpu/gpu_pool_import.h"
#include "client/gpu/paged_layout.h"
#include "common/cuda/pinned_host_range.h"

namespace kvtier::client::gpu {

// Stores one block per key from `device_blocks` (device memory, block_bytes each).
// kInvalidArgument when keys and blocks differ in number or a pointer is null.
// An error of the ordering itself (copier.OrderAfter) fails the call before anything is reserved.
Result<std::vector<Status>> PutFromDevice(Client& client, DeviceCopier& copier,
                                          const NamespaceId& ns, std::span<const BlockKey> keys,
                                          std::span<const void* const> device_blocks,
                                          size_t block_bytes, const CallerStream& caller = {});

// Fetches the leading cached blocks of `keys` into `device_blocks`; returns how many were served.
// With `pool` (mapped), blocks in the daemon's GPU pool are copied device-to-device out of it; an
// unmapped one is as none. kInvalidArgument when `pool` and `copier` do not go together (a fake
// pool needs the fake copier, a CUDA pool the CUDA one, opened on the copier's device).
// kShuttingDown when the daemon is stopping: with a mapped `pool` the call has then done what
// the daemon asks of an importer (gpu_pool_import.h): *pool is closed (unmapped) and the
// connection detached, and the caller may go on without it (GPU blocks come inline) until the
// daemon is gone.
Result<size_t> GetToDevice(Client& client, DeviceCopier& copier, const NamespaceId& ns,
                           std::span<const BlockKey> keys, std::span<void* const> device_blocks,
                           size_t block_bytes, GpuPoolImport* pool = nullptr,
                           const CallerStream& caller = {});

// Stores block block_ids[i] of `layout` under keys[i]. The stored block is layout.block_bytes()
// long, plane after plane. kInvalidArgument for a bad layout (ValidatePagedLayout) or when keys
// and block ids differ in number.
Result<std::vector<Status>> PutFromPaged(Client& client, DeviceCopier& copier,
                                         const NamespaceId& ns, std::span<const BlockKey> keys,
                                         const PagedKvLayout& layout,
                                         std::span<const uint64_t> block_ids,
                                         const CallerStream& caller = {});

// Fetches the leading cached blocks of `keys` into blocks block_ids[i] of `layout`; returns how
// many were served. `pool` as for GetToDevice (closed and detached on kShuttingDown too): GPU
// blocks are scattered straight out of it.
Result<size_t> GetToPaged(Client& client, DeviceCopier& copier, const NamespaceId& ns,
                          std::span<const BlockKey> keys, const PagedKvLayout& layout,
                          std::span<const uint64_t> block_ids, GpuPoolImport* pool = nullptr,
                          const CallerStream& caller = {});

// Registers the client's arena mapping with CUDA (see the header comment). Not pinned, with the
// reason in status(), when the client is not attached, there is no CUDA or no device.
cuda::PinnedHostRange PinArena(const Client& client);

}  // namespace kvtier::client::gpu
