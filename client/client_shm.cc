// Client: the shared-memory path. Attach maps the daemon's host arena; Put and Get copy between
// caller memory and arena slots under reservations and leases (docs/protocol.md, "Shared-memory
// path").
#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>

#include "client/client.h"
#include "client/connection.h"
#include "client/reply_mapping.h"
#include "common/stream_copy.h"

namespace kvtier::client {
namespace {

template <typename Block>
size_t TotalBytes(const Block& block) {
  size_t total = 0;
  for (const auto& segment : block) total += segment.bytes;
  return total;
}

// Fills an arena slot. The slot is read later by the daemon or other clients, never again by this
// thread, so large segments are written around the cache (common/stream_copy.h).
void Gather(ConstBlock block, std::byte* dst) {
  for (const ConstSegment& segment : block) {
    if (segment.bytes > 0) StreamCopy(dst, segment.data, segment.bytes);
    dst += segment.bytes;
  }
}

void Scatter(const std::byte* src, MutableBlock block) {
  for (const MutableSegment& segment : block) {
    if (segment.bytes > 0) std::memcpy(segment.data, src, segment.bytes);
    src += segment.bytes;
  }
}

Status NotAttached(std::string_view call) {
  return InvalidArgument(std::string(call) +
                         ": not attached to the arena; call Attach() first (shared memory needs a "
                         "unix:// URL), or use the inline calls");
}

size_t ChunkCount(size_t n) { return (n + kMaxKeysPerCommand - 1) / kMaxKeysPerCommand; }

}  // namespace

Result<std::vector<SlotGrant>> Client::DecodeGrantsOrAbandon(std::span<const resp::Reply> replies,
                                                             size_t keys,
                                                             std::string_view command) {
  return OrAbandon(DecodeChunkedGrants(replies, keys, kMaxKeysPerCommand, command));
}

Result<std::vector<SlotGrant>> Client::AcquirePrefix(const NamespaceId& ns,
                                                     std::span<const BlockKey> keys,
                                                     bool reads_gpu_pool) {
  const auto readable = [&](const SlotGrant& grant) {
    return grant.status.ok() &&
           (grant.tier == TierId::kHost || (reads_gpu_pool && grant.tier == TierId::kGpu));
  };
  std::vector<SlotGrant> grants;
  grants.reserve(keys.size());
  for (size_t start = 0; start < keys.size();) {
    const size_t count = std::min(kMaxKeysPerCommand, keys.size() - start);
    RequestBuffer acquire;
    AppendKeyCommands(acquire, "KVT.ACQUIRE", ns, keys.subspan(start, count), kMaxKeysPerCommand);
    // A failure here after earlier commands leased blocks leaves the connection given up (an I/O
    // error, or DecodeGrantsOrAbandon's), and closing it makes the daemon end those leases.
    KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, RoundTrip(acquire));
    KVTIER_ASSIGN_OR_RETURN(std::vector<SlotGrant> part,
                            DecodeGrantsOrAbandon(replies, count, "KVT.ACQUIRE"));
    const bool whole = std::all_of(part.begin(), part.end(), readable);
    std::move(part.begin(), part.end(), std::back_inserter(grants));
    start += count;
    if (!whole) break;
  }
  SlotGrant not_asked;  // past the prefix's end; a message short enough to allocate nothing
  not_asked.status = NotFound("not asked");
  grants.resize(keys.size(), not_asked);
  return grants;
}

Result<ArenaInfo> Client::Attach() {
  if (!endpoint().is_unix()) {
    return InvalidArgument("KVT.ATTACH: " + endpoint().url +
                           " is a TCP connection; shared memory needs a unix:// URL (use the "
                           "inline calls over TCP)");
  }
  connection_->DiscardReceivedFds();
  KVTIER_ASSIGN_OR_RETURN(resp::Reply reply, Command({"KVT.ATTACH"}));
  // A descriptor that arrived with a refused reply is closed here rather than kept.
  UniqueFd fd = connection_->TakeReceivedFd();
  KVTIER_ASSIGN_OR_RETURN(ArenaInfo info, DecodeAttach(reply));
  KVTIER_ASSIGN_OR_RETURN(arena_, SharedArena::Map(std::move(fd), info.arena_bytes));
  return info;
}

Result<GpuPoolExport> Client::AttachGpuPool() {
  if (!endpoint().is_unix()) {
    return InvalidArgument("KVT.GPUATTACH: " + endpoint().url +
                           " is a TCP connection; the GPU pool is shared over a unix:// URL only");
  }
  connection_->DiscardReceivedFds();
  KVTIER_ASSIGN_OR_RETURN(resp::Reply reply, Command({"KVT.GPUATTACH"}));
  UniqueFd fd = connection_->TakeReceivedFd();
  Result<GpuPoolExport> exported = DecodeGpuAttach(reply);
  if (exported.ok() && exported->kind == "memfd" && !fd.valid()) {
    exported = InvalidArgument("KVT.GPUATTACH: a memfd pool came without its descriptor");
  }
  if (!exported.ok()) {
    // The daemon may have attached the connection all the same (it answered, but not as
    // expected): undo that, best effort, so the caller's error leaves nothing attached.
    if (reply.type != resp::ReplyType::kError) (void)DetachGpuPool();
    return exported.status();
  }
  exported->fd = std::move(fd);
  return exported;
}

Status Client::DetachGpuPool() {
  KVTIER_ASSIGN_OR_RETURN(resp::Reply reply, Command({"KVT.GPUDETACH"}));
  return DecodeOk(reply, "KVT.GPUDETACH");
}

Result<std::vector<Status>> Client::Put(const NamespaceId& ns, std::span<const BlockKey> keys,
                                        std::span<const void* const> blocks, size_t block_bytes) {
  std::vector<ConstSegment> segments;
  segments.reserve(blocks.size());
  for (const void* block : blocks) segments.push_back(ConstSegment{block, block_bytes});
  std::vector<ConstBlock> lists;
  lists.reserve(segments.size());
  for (const ConstSegment& segment : segments) lists.emplace_back(&segment, 1);
  return Put(ns, keys, std::span<const ConstBlock>(lists));
}

Result<std::vector<Status>> Client::Put(const NamespaceId& ns, std::span<const BlockKey> keys,
                                        std::span<const ConstBlock> blocks) {
  if (!attached()) return NotAttached("KVT.RESERVE");
  if (keys.size() != blocks.size()) {
    return InvalidArgument("KVT.RESERVE: " + std::to_string(keys.size()) + " keys but " +
                           std::to_string(blocks.size()) + " blocks");
  }
  std::vector<Status> statuses(keys.size());
  if (keys.empty()) return statuses;
  const size_t block_bytes = TotalBytes(blocks[0]);
  for (size_t i = 1; i < blocks.size(); ++i) {
    if (TotalBytes(blocks[i]) != block_bytes) {
      return InvalidArgument("KVT.RESERVE: block " + std::to_string(i) + " is " +
                             std::to_string(TotalBytes(blocks[i])) + " bytes, block 0 is " +
                             std::to_string(block_bytes) + ": all blocks of a call have one size");
    }
  }
  RequestBuffer reserve;
  const std::string size_arg = std::to_string(block_bytes);
  AppendKeyCommands(reserve, "KVT.RESERVE", ns, keys, kMaxKeysPerCommand,
                    std::span<const std::string>(&size_arg, 1));
  KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> reserve_replies, RoundTrip(reserve));
  KVTIER_ASSIGN_OR_RETURN(std::vector<SlotGrant> grants,
                          DecodeGrantsOrAbandon(reserve_replies, keys.size(), "KVT.RESERVE"));
  FilledSlots filled = FillSlots(grants, blocks, block_bytes, statuses);
  KVTIER_RETURN_IF_ERROR(FinishReservations(filled, statuses));
  return statuses;
}

Client::FilledSlots Client::FillSlots(std::span<const SlotGrant> grants,
                                      std::span<const ConstBlock> blocks, size_t block_bytes,
                                      std::vector<Status>& statuses) {
  FilledSlots filled;
  for (size_t i = 0; i < grants.size(); ++i) {
    statuses[i] = grants[i].status;
    if (!grants[i].status.ok()) continue;
    std::byte* slot = arena_.Slice(grants[i].offset, block_bytes);
    if (slot == nullptr) {
      statuses[i] =
          Internal("KVT.RESERVE: slot at offset " + std::to_string(grants[i].offset) +
                   " lies outside the " + std::to_string(arena_.size_bytes()) + "-byte arena");
      filled.abort_ids.push_back(grants[i].id);
      continue;
    }
    Gather(blocks[i], slot);
    filled.commit_ids.push_back(grants[i].id);
    filled.commit_index.push_back(i);
  }
  return filled;
}

Status Client::FinishReservations(const FilledSlots& filled, std::vector<Status>& statuses) {
  if (filled.commit_ids.empty() && filled.abort_ids.empty()) return Status::Ok();
  RequestBuffer finish;
  AppendIdCommands(finish, "KVT.COMMIT", filled.commit_ids);
  AppendIdCommands(finish, "KVT.ABORT", filled.abort_ids);
  KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, RoundTrip(finish));
  counters_.aborted_puts += filled.abort_ids.size();
  const size_t commit_chunks = ChunkCount(filled.commit_ids.size());
  KVTIER_ASSIGN_OR_RETURN(
      std::vector<Status> committed,
      OrAbandon(DecodeChunkedStatuses(std::span(replies).first(commit_chunks),
                                      filled.commit_ids.size(), kMaxKeysPerCommand, "KVT.COMMIT")));
  for (size_t j = 0; j < committed.size(); ++j) {
    Status& status = statuses[filled.commit_index[j]];
    if (committed[j].code() == StatusCode::kNotFound) {
      // The daemon gave the reservation up (reservation_timeout) before the commit arrived.
      status = Timeout("KVT.COMMIT: reservation expired before the commit");
    } else {
      status = std::move(committed[j]);
    }
  }
  return Status::Ok();
}

Result<size_t> Client::Get(const NamespaceId& ns, std::span<const BlockKey> keys,
                           std::span<void* const> blocks, size_t block_bytes) {
  std::vector<MutableSegment> segments;
  segments.reserve(blocks.size());
  for (void* block : blocks) segments.push_back(MutableSegment{block, block_bytes});
  std::vector<MutableBlock> lists;
  lists.reserve(segments.size());
  for (const MutableSegment& segment : segments) lists.emplace_back(&segment, 1);
  return Get(ns, keys, std::span<const MutableBlock>(lists));
}

Result<size_t> Client::Get(const NamespaceId& ns, std::span<const BlockKey> keys,
                           std::span<const MutableBlock> blocks) {
  if (!attached()) return NotAttached("KVT.ACQUIRE");
  if (keys.size() != blocks.size()) {
    return InvalidArgument("KVT.ACQUIRE: " + std::to_string(keys.size()) + " keys but " +
                           std::to_string(blocks.size()) + " blocks");
  }
  if (keys.empty()) return size_t{0};
  KVTIER_ASSIGN_OR_RETURN(std::vector<SlotGrant> grants,
                          AcquirePrefix(ns, keys, /*reads_gpu_pool=*/false));
  LeasedCopy copy = CopyLeased(grants, blocks);
  KVTIER_ASSIGN_OR_RETURN(size_t served, ReleaseLeases(copy));
  if (!copy.error.ok()) return ServedOr(served, copy.error);
  // ACQUIRE only leases blocks of the host arena (and, after AttachGpuPool, of the GPU pool, which
  // memcpy cannot read); a block on NVMe or in the GPU pool answers NOTFOUND there (or is skipped)
  // but KVT.GET reads it. So the prefix goes on inline from the first such miss. A true miss costs
  // that one extra round trip; a caller that looked the prefix up first rarely pays it.
  if (served == copy.first_miss && served < keys.size()) {
    // Its failure (-BUSY at the lease limit, a lost connection) leaves the leased blocks served.
    Result<size_t> more = GetInline(ns, keys.subspan(served), blocks.subspan(served));
    if (!more.ok()) return ServedOr(served, more.status());
    served += *more;
  }
  return served;
}

Client::LeasedCopy Client::CopyLeased(std::span<const SlotGrant> grants,
                                      std::span<const MutableBlock> blocks) {
  LeasedCopy copy;
  copy.first_miss = grants.size();
  for (size_t i = 0; i < grants.size(); ++i) {
    if (!grants[i].status.ok()) {
      copy.first_miss = std::min(copy.first_miss, i);
      continue;
    }
    // Every granted lease is released, copied or not.
    copy.release_ids.push_back(grants[i].id);
    copy.release_index.push_back(i);
    if (grants[i].tier != TierId::kHost) {
      copy.first_miss = std::min(copy.first_miss, i);  // device memory: read inline instead
      continue;
    }
    if (i != copy.copied) continue;  // past a miss or a block that could not be copied
    const size_t want = TotalBytes(blocks[i]);
    const std::byte* src = arena_.Slice(grants[i].offset, grants[i].length);
    if (src == nullptr) {
      copy.error = Internal("KVT.ACQUIRE: lease at offset " + std::to_string(grants[i].offset) +
                            " lies outside the arena");
    } else if (grants[i].length != want) {
      copy.error = InvalidArgument("KVT.ACQUIRE: block " + std::to_string(i) + " is " +
                                   std::to_string(grants[i].length) +
                                   " bytes but its destination is " + std::to_string(want));
    } else {
      Scatter(src, blocks[i]);
      ++copy.copied;
    }
  }
  return copy;
}

Result<size_t> Client::ReleaseLeases(const LeasedCopy& copy) {
  if (copy.release_ids.empty()) return copy.copied;
  RequestBuffer release;
  AppendIdCommands(release, "KVT.RELEASE", copy.release_ids);
  KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, RoundTrip(release));
  KVTIER_ASSIGN_OR_RETURN(std::vector<Status> released,
                          OrAbandon(DecodeChunkedStatuses(replies, copy.release_ids.size(),
                                                          kMaxKeysPerCommand, "KVT.RELEASE")));
  // A lease that had ended before its release may have had its slot reused mid-copy: the copy is
  // torn, so the served prefix ends before that block.
  size_t served = copy.copied;
  for (size_t j = 0; j < released.size(); ++j) {
    if (!released[j].ok() && copy.release_index[j] < copy.copied) {
      ++counters_.torn_reads;
      served = std::min(served, copy.release_index[j]);
    }
  }
  return served;
}

}  // namespace kvtier::client
