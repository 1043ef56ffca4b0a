// The shared-memory path: KVT.ATTACH (the arena's memfd over SCM_RIGHTS), KVT.RESERVE,
// KVT.COMMIT, KVT.ABORT, KVT.ACQUIRE and KVT.RELEASE. The client copies block bytes itself, at the
// arena offsets these commands hand out (and, after KVT.GPUATTACH, at GPU pool offsets for leased
// GPU blocks); the session remembers every id so that only this client can finish it and so that
// a vanished client's ids are ended (session.h).
#include <optional>
#include <string>
#include <vector>

#include "daemon/server/commands.h"
#include "daemon/server/kvt_args.h"
#include "daemon/server/wire.h"
#include "daemon/store/store.h"

namespace kvtier::server {
namespace {

using resp::Command;

Progress Attach(CommandContext& ctx, Command&) {
  if (RefuseWithoutSharedMemory(ctx, "KVT.ATTACH")) return Progress::kDone;
  const SharedArena& arena = *ctx.server.arena;
  ctx.send_fd = arena.fd;
  ctx.session.set_arena_attached();
  ctx.reply.AppendMapHeader(2);
  ctx.reply.AppendBulk("arena_bytes");
  ctx.reply.AppendInteger(static_cast<int64_t>(arena.bytes));
  ctx.reply.AppendBulk("tier");
  ctx.reply.AppendBulk(TierName(arena.tier));
  return Progress::kDone;
}

// `[status, id, offset]` (RESERVE) or `[status, id, offset, length]` (ACQUIRE), plus `tier` when
// given: the tier code of a lease granted to a connection that attached the GPU pool, which says
// whether the offset is in the arena or in the pool. Clients that never attached see the four
// elements they always did.
void AppendGrant(CommandContext& ctx, std::string_view status, uint64_t id, const Extent& extent,
                 bool with_length, std::optional<TierId> tier = std::nullopt) {
  ctx.reply.AppendArrayHeader(tier ? 5 : with_length ? 4 : 3);
  ctx.reply.AppendSimpleString(status);
  ctx.reply.AppendInteger(static_cast<int64_t>(id));
  ctx.reply.AppendInteger(static_cast<int64_t>(extent.offset));
  if (with_length || tier) ctx.reply.AppendInteger(static_cast<int64_t>(extent.length));
  if (tier) ctx.reply.AppendInteger(static_cast<int64_t>(*tier));
}

// Whether the client can read a block of `tier` through memory it has mapped: the arena, and the
// GPU pool once it attached it (both exported by the store, so offsets are the store's extents).
bool MappedByClient(const CommandContext& ctx, TierId tier) {
  if (tier == ctx.server.arena->tier) return true;
  return tier == TierId::kGpu && ctx.session.gpu_pool_attached();
}

// What ReserveOne and AcquireOne answer when the store's mover has the key's move in hand and the
// command waits for it; never sent to a client.
constexpr std::string_view kPendingWord = "PENDING";

// One key of KVT.RESERVE: the status word, with the reservation recorded in the session.
std::string_view ReserveOne(CommandContext& ctx, const NamespaceId& ns, const BlockKey& key,
                            uint64_t bytes, store::Reservation& out) {
  if (ctx.session.reservations_held() >= kMaxHeldIdsPerConnection) return "BUSY";
  Result<store::Reservation> r = ctx.server.store.BeginPut(ns, key, bytes);
  if (ctx.WaitsForMover(r.status())) return kPendingWord;
  if (!r.ok()) return StatusWord(r.status().code());  // kPending past the wait: BUSY
  if (r->tier != ctx.server.arena->tier) {
    // The slot is in a tier the client has not mapped (a GPU pool placed above the host arena);
    // it cannot be written through shared memory, so the client must use KVT.PUT.
    (void)ctx.server.store.AbortPut(r->id);
    return "REJECTED";
  }
  ctx.session.AddReservation(r->id, /*client_writes=*/true);
  ctx.Found(r->tier);
  out = *r;
  return "OK";
}

Progress Reserve(CommandContext& ctx, Command& cmd) {
  if (RefuseWithoutSharedMemory(ctx, "KVT.RESERVE")) return Progress::kDone;
  std::optional<KvtNamespace> ns = ParseKvtNamespace(ctx, cmd.args[1]);
  if (!ns) return Progress::kDone;
  std::optional<size_t> count = CheckPackedKeys(ctx, cmd.args[2]);
  if (!count) return Progress::kDone;
  std::optional<uint64_t> bytes = ParseUint64(cmd.args[3]);
  if (!bytes) {
    ctx.reply.AppendError(kNotAnInteger);
    return Progress::kDone;
  }
  if (!ns->known) {
    AppendUnknownNamespace(ctx, ns->id);
    return Progress::kDone;
  }
  ctx.Time(metrics::RequestOp::kPut, metrics::RequestPath::kShm);
  if (!ctx.started) ctx.reply.AppendArrayHeader(*count);
  ctx.started = true;
  // Resumable: a key that waits for room (the mover is making it) is tried again from there.
  for (; ctx.cursor < *count; ++ctx.cursor) {
    store::Reservation r;
    std::string_view status =
        ReserveOne(ctx, ns->id, PackedKey(cmd.args[2], ctx.cursor), *bytes, r);
    if (status == kPendingWord) return Progress::kRetryLater;
    AppendGrant(ctx, status, r.id, r.extent, /*with_length=*/false);
  }
  return Progress::kDone;
}

// One key of KVT.ACQUIRE: the status word, with the lease recorded in the session.
std::string_view AcquireOne(CommandContext& ctx, const NamespaceId& ns, const BlockKey& key,
                            store::Lease& out) {
  if (ctx.session.leases_held() >= kMaxHeldIdsPerConnection) return "BUSY";
  // Only a client that mapped the GPU pool would read a promoted block from it.
  Result<store::Lease> lease =
      ctx.server.store.Acquire(ns, key,
                               ctx.session.gpu_pool_attached() ? store::Store::Reader::kGpuPool
                                                               : store::Store::Reader::kHostMemory);
  if (lease.status().code() == StatusCode::kPending) {
    ctx.FoundPending(lease.status());
    // Not in memory in time: a miss the engine recomputes.
    return ctx.WaitsForMover(lease.status()) ? kPendingWord : "NOTFOUND";
  }
  if (!lease.ok()) return StatusWord(lease.status().code());
  if (!MappedByClient(ctx, lease->tier)) {
    // Not in memory the client mapped: it cannot read it through shared memory; KVT.GET can.
    (void)ctx.server.store.Release(lease->id);
    return "NOTFOUND";
  }
  ctx.session.AddLease(lease->id);
  ctx.Found(lease->tier);
  out = *lease;
  return "OK";
}

Progress Acquire(CommandContext& ctx, Command& cmd) {
  if (RefuseWithoutSharedMemory(ctx, "KVT.ACQUIRE")) return Progress::kDone;
  std::optional<KvtNamespace> ns = ParseKvtNamespace(ctx, cmd.args[1]);
  if (!ns) return Progress::kDone;
  std::optional<size_t> count = CheckPackedKeys(ctx, cmd.args[2]);
  if (!count) return Progress::kDone;
  ctx.Time(metrics::RequestOp::kGet, metrics::RequestPath::kShm);
  if (!ctx.started) {
    ctx.reply.AppendArrayHeader(*count);
    ctx.stopped = !ns->known;
    ctx.started = true;
  }
  // Resumable: a block on NVMe is read up by the mover while the connection waits.
  for (; ctx.cursor < *count; ++ctx.cursor) {
    store::Lease lease;
    const bool waited = ctx.WaitedForMover();
    // Like KVT.GET, stop at the first miss: the rest of the chain is useless without it.
    const std::string_view status =
        ctx.stopped ? "NOTFOUND"
                    : AcquireOne(ctx, ns->id, PackedKey(cmd.args[2], ctx.cursor), lease);
    if (status == kPendingWord) {
      if (!waited) PrefetchRestOfPrefix(ctx, ns->id, cmd.args[2], ctx.cursor + 1, *count);
      return Progress::kRetryLater;
    }
    ctx.stopped = status != "OK";
    std::optional<TierId> tier;
    if (!ctx.stopped && ctx.session.gpu_pool_attached()) tier = lease.tier;
    AppendGrant(ctx, status, lease.id, lease.extent, /*with_length=*/true, tier);
  }
  return Progress::kDone;
}

// KVT.COMMIT, KVT.ABORT and KVT.RELEASE: parse every id first (one bad id fails the command and
// changes nothing), then finish each and answer its status word.
template <bool (Session::*kTake)(uint64_t), Status (*kFinish)(CommandContext&, uint64_t)>
Progress FinishIds(CommandContext& ctx, Command& cmd) {
  std::vector<uint64_t> ids;
  ids.reserve(cmd.size() - 1);
  for (size_t i = 1; i < cmd.size(); ++i) {
    std::optional<uint64_t> id = ParseUint64(cmd.args[i]);
    if (!id) {
      ctx.reply.AppendError(kNotAnInteger);
      return Progress::kDone;
    }
    ids.push_back(*id);
  }
  ctx.reply.AppendArrayHeader(ids.size());
  for (uint64_t id : ids) {
    Status st =
        (ctx.session.*kTake)(id) ? kFinish(ctx, id) : NotFound("not held by this connection");
    ctx.reply.AppendSimpleString(StatusWord(st.code()));
  }
  return Progress::kDone;
}

Status Commit(CommandContext& ctx, uint64_t id) {
  Status committed = ctx.server.store.CommitPut(id);
  if (committed.ok()) {
    ctx.NoteCommit(id, ctx.reply.buffer()->size());  // FinishIds appends its word next
    // Its block is in the arena: ReserveOne hands out no other slot.
    if (ctx.server.arena) ctx.Found(ctx.server.arena->tier);
  }
  return committed;
}
Status Abort(CommandContext& ctx, uint64_t id) { return ctx.server.store.AbortPut(id); }
Status Release(CommandContext& ctx, uint64_t id) { return ctx.server.store.Release(id); }

// KVT.COMMIT, timed (Commit reports the tier of each block it commits).
Progress CommitIds(CommandContext& ctx, Command& cmd) {
  ctx.Time(metrics::RequestOp::kCommit, metrics::RequestPath::kShm);
  return FinishIds<&Session::TakeReservation, Commit>(ctx, cmd);
}

constexpr CommandSpec kCommands[] = {
    {"KVT.ATTACH", 1, false, Attach},
    {"KVT.RESERVE", 4, false, Reserve},
    {"KVT.COMMIT", -2, false, CommitIds},
    {"KVT.ABORT", -2, false, FinishIds<&Session::TakeReservation, Abort>},
    {"KVT.ACQUIRE", 3, false, Acquire},
    {"KVT.RELEASE", -2, false, FinishIds<&Session::TakeLease, Release>, true},
};

}  // namespace

std::span<const CommandSpec> KvtShmCommands() { return kCommands; }

}  // namespace kvtier::server
