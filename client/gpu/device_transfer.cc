#include "client/gpu/device_transfer.h"

#include <algorithm>
#include <string>

namespace kvtier::client::gpu {
namespace {

// A GPU lease's place in the imported pool (gets only).
Result<std::byte*> PoolSource(const GpuPoolImport* pool, uint64_t offset, uint64_t length) {
  std::byte* src = pool->Slice(offset, length);
  if (src == nullptr) {
    return Internal("KVT.ACQUIRE: GPU lease at offset " + std::to_string(offset) +
                    " lies outside the " + std::to_string(pool->size_bytes()) + "-byte pool");
  }
  return src;
}

// Block i is a contiguous device buffer.
class ContiguousCopier final : public SlotCopier {
 public:
  ContiguousCopier(DeviceCopier& copier, std::span<const void* const> blocks, bool to_slot,
                   const GpuPoolImport* pool = nullptr)
      : copier_(copier), blocks_(blocks), to_slot_(to_slot), pool_(pool) {}
  Status Start(size_t index, std::span<std::byte> slot) override {
    void* device = const_cast<void*>(blocks_[index]);
    return to_slot_ ? copier_.Copy(slot.data(), device, slot.size(), CopyDirection::kDeviceToHost)
                    : copier_.Copy(device, slot.data(), slot.size(), CopyDirection::kHostToDevice);
  }
  Status Wait() override { return copier_.Synchronize(); }
  bool reads_gpu_pool() const override { return pool_ != nullptr && !to_slot_; }
  Status StartFromGpuPool(size_t index, uint64_t offset, uint64_t length) override {
    KVTIER_ASSIGN_OR_RETURN(std::byte * src, PoolSource(pool_, offset, length));
    return copier_.Copy(const_cast<void*>(blocks_[index]), src, length,
                        CopyDirection::kDeviceToDevice);
  }

 private:
  DeviceCopier& copier_;
  std::span<const void* const> blocks_;
  bool to_slot_;
  const GpuPoolImport* pool_;
};

// Block i is block_ids[i] of a paged layout. Start only notes the block; Wait hands all of them
// to the copier as one batch (one kernel launch per kKernelMaxBatch blocks, where a copy per
// block cost a launch each), then waits. A failed batch fails every block since the previous
// Wait, as SlotCopier allows.
class PagedCopier final : public SlotCopier {
 public:
  PagedCopier(DeviceCopier& copier, const PagedKvLayout& layout,
              std::span<const uint64_t> block_ids, bool to_slot,
              const GpuPoolImport* pool = nullptr)
      : copier_(copier), layout_(layout), block_ids_(block_ids), to_slot_(to_slot), pool_(pool) {
    pending_.reserve(std::min<size_t>(block_ids.size(), kKernelMaxBatch * 4));
  }
  Status Start(size_t index, std::span<std::byte> slot) override {
    pending_.push_back(
        {.block_id = block_ids_[index], .contiguous = slot.data(), .kind = MemoryKind::kHost});
    return Status::Ok();
  }
  Status Wait() override {
    Status queued;
    if (!pending_.empty()) {
      queued = to_slot_ ? copier_.GatherBlocks(layout_, pending_)
                        : copier_.ScatterBlocks(pending_, layout_);
      pending_.clear();
    }
    // Even when queueing failed: part of the batch may be in flight.
    Status synchronized = copier_.Synchronize();
    return queued.ok() ? synchronized : queued;
  }
  bool reads_gpu_pool() const override { return pool_ != nullptr && !to_slot_; }
  Status StartFromGpuPool(size_t index, uint64_t offset, uint64_t length) override {
    KVTIER_ASSIGN_OR_RETURN(std::byte * src, PoolSource(pool_, offset, length));
    pending_.push_back(
        {.block_id = block_ids_[index], .contiguous = src, .kind = MemoryKind::kDevice});
    return Status::Ok();
  }

 private:
  DeviceCopier& copier_;
  const PagedKvLayout& layout_;
  std::span<const uint64_t> block_ids_;
  bool to_slot_;
  const GpuPoolImport* pool_;
  std::vector<PagedBlockCopy> pending_;  // started since the last Wait
};

// A fake pool is host memory that only the fake copier may treat as device memory; a CUDA pool
// is device memory that memcpy must never touch.
// A CUDA pool is mapped into one device's context: the copies out of it must run there.
Status CheckPool(const GpuPoolImport* pool, const DeviceCopier& copier, const char* what) {
  if (pool == nullptr) return Status::Ok();
  if (pool->fake() != copier.fake()) {
    return InvalidArgument(std::string(what) + ": a " + (pool->fake() ? "fake" : "CUDA") +
                           " GPU pool needs the " + (pool->fake() ? "fake" : "CUDA") +
                           " device copier");
  }
  if (!pool->fake() && pool->device() != copier.device()) {
    return InvalidArgument(std::string(what) + ": the GPU pool was opened on device " +
                           std::to_string(pool->device()) + " and the copier copies on device " +
                           std::to_string(copier.device()) +
                           "; attach with AttachGpuPool(client, copier.device())");
  }
  return Status::Ok();
}

Status CheckCounts(size_t keys, size_t blocks, const char* what) {
  if (keys == blocks) return Status::Ok();
  return InvalidArgument(std::string(what) + ": " + std::to_string(keys) + " keys but " +
                         std::to_string(blocks) + " blocks");
}

template <typename Pointer>
Status CheckPointers(std::span<Pointer const> blocks, const char* what) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i] == nullptr) {
      return InvalidArgument(std::string(what) + ": block " + std::to_string(i) + " is null");
    }
  }
  return Status::Ok();
}

// The pool to read, if any: an import closed after kShuttingDown is as none.
const GpuPoolImport* Readable(const GpuPoolImport* pool) {
  return pool != nullptr && pool->mapped() ? pool : nullptr;
}

// kShuttingDown on a connection that maps the pool: the daemon waits for its importers before it
// frees the pool (gpu_pool_import.h), so let go of it now, closing the import, then detaching.
// The get waited for its copies before it returned, so nothing reads the import any more.
Result<size_t> LetGoOnShutdown(Result<size_t> got, Client& client, GpuPoolImport* pool) {
  if (got.ok() || got.status().code() != StatusCode::kShuttingDown || Readable(pool) == nullptr) {
    return got;
  }
  *pool = GpuPoolImport();
  const Status detached = client.DetachGpuPool();
  return ShuttingDown(
      got.status().message() + " (the GPU pool import is closed" +
      (detached.ok() ? " and detached)" : "; KVT.GPUDETACH: " + detached.ToString() + ")"));
}

}  // namespace

Result<std::vector<Status>> PutFromDevice(Client& client, DeviceCopier& copier,
                                          const NamespaceId& ns, std::span<const BlockKey> keys,
                                          std::span<const void* const> device_blocks,
                                          size_t block_bytes, const CallerStream& caller) {
  KVTIER_RETURN_IF_ERROR(CheckCounts(keys.size(), device_blocks.size(), "PutFromDevice"));
  KVTIER_RETURN_IF_ERROR(CheckPointers(device_blocks, "PutFromDevice"));
  KVTIER_RETURN_IF_ERROR(copier.OrderAfter(caller));
  ContiguousCopier slots(copier, device_blocks, /*to_slot=*/true);
  return client.PutWith(ns, keys, block_bytes, slots);
}

Result<size_t> GetToDevice(Client& client, DeviceCopier& copier, const NamespaceId& ns,
                           std::span<const BlockKey> keys, std::span<void* const> device_blocks,
                           size_t block_bytes, GpuPoolImport* pool, const CallerStream& caller) {
  KVTIER_RETURN_IF_ERROR(CheckCounts(keys.size(), device_blocks.size(), "GetToDevice"));
  KVTIER_RETURN_IF_ERROR(CheckPointers(device_blocks, "GetToDevice"));
  KVTIER_RETURN_IF_ERROR(CheckPool(Readable(pool), copier, "GetToDevice"));
  KVTIER_RETURN_IF_ERROR(copier.OrderAfter(caller));
  std::span<const void* const> blocks(const_cast<const void* const*>(device_blocks.data()),
                                      device_blocks.size());
  ContiguousCopier slots(copier, blocks, /*to_slot=*/false, Readable(pool));
  return LetGoOnShutdown(client.GetWith(ns, keys, block_bytes, slots), client, pool);
}

Result<std::vector<Status>> PutFromPaged(Client& client, DeviceCopier& copier,
                                         const NamespaceId& ns, std::span<const BlockKey> keys,
                                         const PagedKvLayout& layout,
                                         std::span<const uint64_t> block_ids,
                                         const CallerStream& caller) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedLayout(layout));
  KVTIER_RETURN_IF_ERROR(CheckCounts(keys.size(), block_ids.size(), "PutFromPaged"));
  KVTIER_RETURN_IF_ERROR(copier.OrderAfter(caller));
  PagedCopier slots(copier, layout, block_ids, /*to_slot=*/true);
  return client.PutWith(ns, keys, layout.block_bytes(), slots);
}

Result<size_t> GetToPaged(Client& client, DeviceCopier& copier, const NamespaceId& ns,
                          std::span<const BlockKey> keys, const PagedKvLayout& layout,
                          std::span<const uint64_t> block_ids, GpuPoolImport* pool,
                          const CallerStream& caller) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedLayout(layout));
  KVTIER_RETURN_IF_ERROR(CheckCounts(keys.size(), block_ids.size(), "GetToPaged"));
  KVTIER_RETURN_IF_ERROR(CheckPool(Readable(pool), copier, "GetToPaged"));
  KVTIER_RETURN_IF_ERROR(copier.OrderAfter(caller));
  PagedCopier slots(copier, layout, block_ids, /*to_slot=*/false, Readable(pool));
  return LetGoOnShutdown(client.GetWith(ns, keys, layout.block_bytes(), slots), client, pool);
}

cuda::PinnedHostRange PinArena(const Client& client) {
  return cuda::PinnedHostRange::Register(client.arena().base(), client.arena().size_bytes());
}

}  // namespace kvtier::client::gpu
