// Client: the shared-memory Put and Get with a caller-supplied copy step (SlotCopier), for blocks
// in memory the client cannot memcpy, such as an engine's device memory (client/gpu). The
// protocol is the one of client_shm.cc: RESERVE, copy, COMMIT (ABORT what failed), and ACQUIRE,
// copy, RELEASE; the difference is that the copies may run asynchronously until one Wait, which
// comes before any commit or release, and that a get may copy leases in the daemon's GPU pool
// when the copier has it mapped.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "client/reply_mapping.h"

namespace kvtier::client {
namespace {

// Inline fallback batches are staged in host memory of at most this many bytes (one block at
// least), so a long prefix of NVMe blocks does not allocate its whole size at once.
constexpr size_t kInlineStagingBytes = size_t{64} << 20;

Status CheckCall(bool attached, std::string_view command, size_t block_bytes) {
  if (!attached) {
    return InvalidArgument(std::string(command) +
                           ": not attached to the arena; call Attach() first (shared memory needs "
                           "a unix:// URL)");
  }
  if (block_bytes == 0) return InvalidArgument(std::string(command) + ": block_bytes is 0");
  return Status::Ok();
}

}  // namespace

Result<std::vector<Status>> Client::PutWith(const NamespaceId& ns, std::span<const BlockKey> keys,
                                            size_t block_bytes, SlotCopier& copier) {
  KVTIER_RETURN_IF_ERROR(CheckCall(attached(), "KVT.RESERVE", block_bytes));
  std::vector<Status> statuses(keys.size());
  if (keys.empty()) return statuses;
  RequestBuffer reserve;
  const std::string size_arg = std::to_string(block_bytes);
  AppendKeyCommands(reserve, "KVT.RESERVE", ns, keys, kMaxKeysPerCommand,
                    std::span<const std::string>(&size_arg, 1));
  KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, RoundTrip(reserve));
  KVTIER_ASSIGN_OR_RETURN(std::vector<SlotGrant> grants,
                          DecodeGrantsOrAbandon(replies, keys.size(), "KVT.RESERVE"));
  FilledSlots filled;
  bool started_any = false;
  for (size_t i = 0; i < grants.size(); ++i) {
    statuses[i] = grants[i].status;
    if (!grants[i].status.ok()) continue;
    std::byte* slot = arena_.Slice(grants[i].offset, block_bytes);
    started_any = started_any || slot != nullptr;
    Status started = slot == nullptr
                         ? Internal("KVT.RESERVE: slot at offset " +
                                    std::to_string(grants[i].offset) + " lies outside the arena")
                         : copier.Start(i, std::span<std::byte>(slot, block_bytes));
    if (!started.ok()) {
      statuses[i] = std::move(started);
      filled.abort_ids.push_back(grants[i].id);
      continue;
    }
    filled.commit_ids.push_back(grants[i].id);
    filled.commit_index.push_back(i);
  }
  if (started_any) {
    // Nothing is committed before every copy into its slot is known to be complete, and nothing
    // is aborted while a failed Start's partial copy may still write into its slot.
    if (Status waited = copier.Wait(); !waited.ok()) {
      for (size_t index : filled.commit_index) statuses[index] = waited;
      filled.abort_ids.insert(filled.abort_ids.end(), filled.commit_ids.begin(),
                              filled.commit_ids.end());
      filled.commit_ids.clear();
      filled.commit_index.clear();
    }
  }
  KVTIER_RETURN_IF_ERROR(FinishReservations(filled, statuses));
  return statuses;
}

Result<size_t> Client::GetWith(const NamespaceId& ns, std::span<const BlockKey> keys,
                               size_t block_bytes, SlotCopier& copier) {
  KVTIER_RETURN_IF_ERROR(CheckCall(attached(), "KVT.ACQUIRE", block_bytes));
  if (keys.empty()) return size_t{0};
  KVTIER_ASSIGN_OR_RETURN(std::vector<SlotGrant> grants,
                          AcquirePrefix(ns, keys, copier.reads_gpu_pool()));
  LeasedCopy copy;
  copy.first_miss = grants.size();
  bool started_any = false;  // a Start was called, failed or not: Wait before any release
  Status copy_failure;  // a device copy that failed: ends the prefix, reported if nothing served
  for (size_t i = 0; i < grants.size(); ++i) {
    if (!grants[i].status.ok()) {
      copy.first_miss = std::min(copy.first_miss, i);
      continue;
    }
    copy.release_ids.push_back(grants[i].id);  // every lease is released, copied or not
    copy.release_index.push_back(i);
    const bool pooled = grants[i].tier == TierId::kGpu;
    if (grants[i].tier != TierId::kHost && !(pooled && copier.reads_gpu_pool())) {
      copy.first_miss = std::min(copy.first_miss, i);  // not mapped here: read inline instead
      continue;
    }
    if (i != copy.copied || !copy.error.ok() || !copy_failure.ok()) continue;
    std::byte* slot = pooled ? nullptr : arena_.Slice(grants[i].offset, grants[i].length);
    if (!pooled && slot == nullptr) {
      copy.error = Internal("KVT.ACQUIRE: lease at offset " + std::to_string(grants[i].offset) +
                            " lies outside the arena");
    } else if (grants[i].length != block_bytes) {
      copy.error = InvalidArgument("KVT.ACQUIRE: block " + std::to_string(i) + " is " +
                                   std::to_string(grants[i].length) + " bytes, not " +
                                   std::to_string(block_bytes));
    } else {
      started_any = true;
      Status started = pooled ? copier.StartFromGpuPool(i, grants[i].offset, grants[i].length)
                              : copier.Start(i, std::span<std::byte>(slot, block_bytes));
      if (started.ok()) {
        ++copy.copied;
      } else {
        copy_failure = std::move(started);
      }
    }
  }
  // The leases end only after the copies out of their slots are complete, a failed Start's
  // partial copy included.
  if (started_any) {
    if (Status waited = copier.Wait(); !waited.ok()) {
      copy.copied = 0;
      copy_failure = std::move(waited);
    }
  }
  KVTIER_ASSIGN_OR_RETURN(size_t served, ReleaseLeases(copy));
  if (!copy.error.ok()) return ServedOr(served, copy.error);
  if (!copy_failure.ok()) return ServedOr(served, copy_failure);
  // As in Get: blocks ACQUIRE cannot lease (on NVMe, in a GPU pool the copier does not read) are
  // read inline, here into host staging memory that the copier then moves on.
  if (served != copy.first_miss) return served;
  const size_t batch = std::max<size_t>(1, kInlineStagingBytes / block_bytes);
  std::vector<std::byte> staging;
  while (served < keys.size()) {
    const size_t count = std::min(batch, keys.size() - served);
    staging.resize(count * block_bytes);
    std::vector<std::span<std::byte>> outputs;
    for (size_t j = 0; j < count; ++j) {
      outputs.emplace_back(staging.data() + j * block_bytes, block_bytes);
    }
    // Its failure (-BUSY at the lease limit, a lost connection) leaves what was served so.
    Result<size_t> inline_got = GetInline(ns, keys.subspan(served, count), outputs);
    if (!inline_got.ok()) return ServedOr(served, inline_got.status());
    const size_t got = *inline_got;
    Status failed;
    size_t started = 0;
    for (; started < got; ++started) {
      failed = copier.Start(served + started, outputs[started]);
      if (!failed.ok()) break;
    }
    // Even when the first Start failed: its partial copy may read `staging`, freed on return.
    if (got > 0) {
      if (Status waited = copier.Wait(); !waited.ok()) {
        started = 0;
        if (failed.ok()) failed = std::move(waited);
      }
    }
    served += started;
    // The first failed copy's error when nothing was served (client.h), not a miss.
    if (!failed.ok()) return ServedOr(served, std::move(failed));
    if (started < count) break;
  }
  return served;
}

}  // namespace kvtier::client
