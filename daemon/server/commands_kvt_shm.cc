// The shared-memory path: KVT.ATTACH (the arena's memfd over SCM_RIGHTS), KVT.RESERVE,
// KVT.COMMIT, KVT.ABORT, KVT.ACQUIRE and KVT.RELEASE. The client copies block bytes itself, at the
// arena offsets these commands hand out; the session remembers every id so that only this client
// can finish it and so that a vanished client's ids are ended (session.h).
#include <string>
#include <vector>

#include "daemon/server/commands.h"
#include "daemon/server/kvt_args.h"
#include "daemon/server/wire.h"
#include "daemon/store/store.h"
#include "tiers/host/host_tier.h"

namespace kvtier::server {
namespace {

using resp::Command;

Progress Attach(CommandContext& ctx, Command&) {
  if (RefuseWithoutSharedMemory(ctx, "KVT.ATTACH")) return Progress::kDone;
  const tiers::HostArena& arena = ctx.server.arena->arena();
  ctx.send_fd = arena.fd();
  ctx.reply.AppendMapHeader(2);
  ctx.reply.AppendBulk("arena_bytes");
  ctx.reply.AppendInteger(static_cast<int64_t>(arena.size()));
  ctx.reply.AppendBulk("tier");
  ctx.reply.AppendBulk(TierName(ctx.server.arena->id()));
  return Progress::kDone;
}

void AppendGrant(CommandContext& ctx, std::string_view status, uint64_t id, const Extent& extent,
                 bool with_length) {
  ctx.reply.AppendArrayHeader(with_length ? 4 : 3);
  ctx.reply.AppendSimpleString(status);
  ctx.reply.AppendInteger(static_cast<int64_t>(id));
  ctx.reply.AppendInteger(static_cast<int64_t>(extent.offset));
  if (with_length) ctx.reply.AppendInteger(static_cast<int64_t>(extent.length));
}

// One key of KVT.RESERVE: the status word, with the reservation recorded in the session.
std::string_view ReserveOne(CommandContext& ctx, const NamespaceId& ns, const BlockKey& key,
                            uint64_t bytes, store::Reservation& out) {
  if (ctx.session.reservations_held() >= kMaxHeldIdsPerConnection) return "BUSY";
  Result<store::Reservation> r = ctx.server.store.BeginPut(ns, key, bytes);
  if (!r.ok()) return StatusWord(r.status().code());
  if (r->tier != ctx.server.arena->id()) {
    // The slot is in a tier the client has not mapped (a GPU pool placed above the host arena);
    // it cannot be written through shared memory, so the client must use KVT.PUT.
    (void)ctx.server.store.AbortPut(r->id);
    return "REJECTED";
  }
  ctx.session.AddReservation(r->id);
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
  ctx.reply.AppendArrayHeader(*count);
  for (size_t i = 0; i < *count; ++i) {
    store::Reservation r;
    const std::string_view status = ReserveOne(ctx, ns->id, PackedKey(cmd.args[2], i), *bytes, r);
    AppendGrant(ctx, status, r.id, r.extent, /*with_length=*/false);
  }
  return Progress::kDone;
}

// One key of KVT.ACQUIRE: the status word, with the lease recorded in the session.
std::string_view AcquireOne(CommandContext& ctx, const NamespaceId& ns, const BlockKey& key,
                            store::Lease& out) {
  if (ctx.session.leases_held() >= kMaxHeldIdsPerConnection) return "BUSY";
  Result<store::Lease> lease = ctx.server.store.Acquire(ns, key);
  if (!lease.ok()) return StatusWord(lease.status().code());
  if (lease->tier != ctx.server.arena->id()) {
    // Not in the mapped arena: the client cannot read it through shared memory; KVT.GET can.
    (void)ctx.server.store.Release(lease->id);
    return "NOTFOUND";
  }
  ctx.session.AddLease(lease->id);
  out = *lease;
  return "OK";
}

Progress Acquire(CommandContext& ctx, Command& cmd) {
  if (RefuseWithoutSharedMemory(ctx, "KVT.ACQUIRE")) return Progress::kDone;
  std::optional<KvtNamespace> ns = ParseKvtNamespace(ctx, cmd.args[1]);
  if (!ns) return Progress::kDone;
  std::optional<size_t> count = CheckPackedKeys(ctx, cmd.args[2]);
  if (!count) return Progress::kDone;
  ctx.reply.AppendArrayHeader(*count);
  bool stopped = !ns->known;
  for (size_t i = 0; i < *count; ++i) {
    store::Lease lease;
    // Like KVT.GET, stop at the first miss: the rest of the chain is useless without it.
    const std::string_view status =
        stopped ? "NOTFOUND" : AcquireOne(ctx, ns->id, PackedKey(cmd.args[2], i), lease);
    stopped = status != "OK";
    AppendGrant(ctx, status, lease.id, lease.extent, /*with_length=*/true);
  }
  return Progress::kDone;
}

// KVT.COMMIT, KVT.ABORT and KVT.RELEASE: parse every id first (one bad id fails the command and
// changes nothing), then finish each and answer its status word.
template <bool (Session::*kTake)(uint64_t), Status (*kFinish)(store::Store&, uint64_t)>
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
    Status st = (ctx.session.*kTake)(id) ? kFinish(ctx.server.store, id)
                                         : NotFound("not held by this connection");
    ctx.reply.AppendSimpleString(StatusWord(st.code()));
  }
  return Progress::kDone;
}

Status Commit(store::Store& store, uint64_t id) { return store.CommitPut(id); }
Status Abort(store::Store& store, uint64_t id) { return store.AbortPut(id); }
Status Release(store::Store& store, uint64_t id) { return store.Release(id); }

constexpr CommandSpec kCommands[] = {
    {"KVT.ATTACH", 1, false, Attach},
    {"KVT.RESERVE", 4, false, Reserve},
    {"KVT.COMMIT", -2, false, FinishIds<&Session::TakeReservation, Commit>},
    {"KVT.ABORT", -2, false, FinishIds<&Session::TakeReservation, Abort>},
    {"KVT.ACQUIRE", 3, false, Acquire},
    {"KVT.RELEASE", -2, false, FinishIds<&Session::TakeLease, Release>},
};

}  // namespace

std::span<const CommandSpec> KvtShmCommands() { return kCommands; }

}  // namespace kvtier::server
