// KV-cache commands with inline payloads: KVT.REGISTER (kvt_register.cc), KVT.DROP, KVT.LOOKUP,
// KVT.REFRESH, KVT.PUT, KVT.GET, KVT.PIN, KVT.DEL, KVT.STATS (info.cc), KVT.EXPLAIN
// (kvt_explain.cc) and KVT.QUOTA (kvt_quota.cc).
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "daemon/server/commands.h"
#include "daemon/server/info.h"
#include "daemon/server/kvt_args.h"
#include "daemon/server/wire.h"
#include "daemon/store/store.h"

namespace kvtier::server {
namespace {

using resp::Command;

// A lookup may hold the prefix it found for up to an hour: long enough for any engine to load it,
// short enough that a client's mistake does not pin blocks for good.
constexpr uint64_t kMaxLookupHoldMs = 3'600'000;

// The tier codes of docs/protocol.md as the characters of LOOKUP's tier string.
char TierCodeChar(TierId tier) { return static_cast<char>('0' + static_cast<int>(tier)); }

Progress Drop(CommandContext& ctx, Command& cmd) {
  std::optional<KvtNamespace> ns = ParseKvtNamespace(ctx, cmd.args[1]);
  if (!ns) return Progress::kDone;
  if (!ns->known) {
    AppendUnknownNamespace(ctx, ns->id);
    return Progress::kDone;
  }
  Result<uint64_t> removed = ctx.server.store.DropNamespace(ns->id);
  if (removed.ok()) {
    ctx.reply.AppendInteger(static_cast<int64_t>(*removed));
  } else {
    AppendStatusError(ctx.reply, removed.status());
  }
  return Progress::kDone;
}

// KVT.LOOKUP's reply: the local prefix, then `remote` blocks found in the remote tier.
void AppendLookup(CommandContext& ctx, const index::LookupResult& local, size_t remote) {
  for (TierId tier : local.tiers) ctx.Found(tier);
  if (remote > 0) ctx.Found(TierId::kRemote);
  std::string tiers(local.ready_prefix + remote, TierCodeChar(TierId::kRemote));
  std::transform(local.tiers.begin(), local.tiers.end(), tiers.begin(), TierCodeChar);
  ctx.reply.AppendArrayHeader(2);
  ctx.reply.AppendInteger(static_cast<int64_t>(local.ready_prefix + remote));
  ctx.reply.AppendBulk(tiers);
}

// Keys one lookup asks the remote tier about, past its local prefix: 1024 blocks of 16 tokens are
// a 16K-token continuation, and a longer one is found by the next lookup, while an unbounded
// EXISTS batch (max_lookup_keys is 65536) would hold the cluster's pipes for one request.
constexpr size_t kMaxRemoteLookupKeys = 1024;

// A lookup whose prefix ran past the local tiers, while the remote tier says which of the next
// blocks it holds. The answer arrives on the remote client's thread.
struct RemoteLookup {
  NamespaceId ns;
  size_t asked = 0;  // keys of the whole lookup, local prefix included
  index::LookupResult local;
  size_t found = 0;  // written before `answered` is set
  std::atomic<bool> answered{false};
};

// Answers once the remote tier did, or once the connection's wait for the mover ran out (the
// remote's own timeout, remote.lookup_timeout_ms, normally comes first): then only the local
// prefix counts.
Progress FinishRemoteLookup(CommandContext& ctx) {
  auto state = std::static_pointer_cast<RemoteLookup>(ctx.resume_state);
  if (!state->answered.load(std::memory_order_acquire) &&
      ctx.WaitsForMover(Pending("asking the remote tier"))) {
    return Progress::kRetryLater;
  }
  const size_t found = state->answered.load(std::memory_order_acquire) ? state->found : 0;
  ctx.server.store.CountLookup(state->ns, state->asked, state->local, found);
  AppendLookup(ctx, state->local, found);
  return Progress::kDone;
}

// KVT.LOOKUP's optional `HOLD <ms>`: how long the prefix found is kept from eviction (0 without
// it), or nullopt after replying with the error.
std::optional<uint64_t> ParseLookupHold(CommandContext& ctx, const Command& cmd) {
  if (cmd.size() == 3) return 0;
  std::optional<uint64_t> ms;
  if (cmd.size() == 5 && resp::EqualsIgnoreCase(cmd.args[3], "HOLD")) ms = ParseUint64(cmd.args[4]);
  if (!ms || *ms > kMaxLookupHoldMs) {
    ctx.reply.AppendError("ERR syntax error: KVT.LOOKUP <ns> <keys> [HOLD <ms>], ms at most " +
                          std::to_string(kMaxLookupHoldMs));
    return std::nullopt;
  }
  return ms;
}

Progress Lookup(CommandContext& ctx, Command& cmd) {
  if (ctx.resume_state) return FinishRemoteLookup(ctx);
  std::optional<KvtNamespace> ns = ParseKvtNamespace(ctx, cmd.args[1]);
  if (!ns) return Progress::kDone;
  std::optional<size_t> count = CheckPackedKeys(ctx, cmd.args[2]);
  if (!count) return Progress::kDone;
  std::optional<uint64_t> hold_ms = ParseLookupHold(ctx, cmd);
  if (!hold_ms) return Progress::kDone;
  // A client that attached the arena moves its blocks through shared memory.
  ctx.Time(metrics::RequestOp::kLookup, ctx.session.arena_attached()
                                            ? metrics::RequestPath::kShm
                                            : metrics::RequestPath::kInline);
  index::LookupResult result;
  if (!ns->known) {
    AppendLookup(ctx, result, 0);
    return Progress::kDone;
  }
  std::vector<BlockKey> keys = PackedKeys(cmd.args[2], 0, *count);
  store::Store& store = ctx.server.store;
  // With a remote tier the lookup may go on there: counted once it ends.
  result = store.Lookup(ns->id, keys, /*count_later=*/store.HasRemoteTier());
  if (*hold_ms > 0) {
    store.Hold(ns->id, std::span<const BlockKey>(keys).first(result.ready_prefix), *hold_ms * 1000);
  }
  if (result.ready_prefix == *count || !store.HasRemoteTier()) {
    if (store.HasRemoteTier()) store.CountLookup(ns->id, *count, result, 0);
    AppendLookup(ctx, result, 0);
    return Progress::kDone;
  }
  // The prefix goes on past the local tiers: perhaps another node published the rest. The
  // connection waits without holding its thread, as it waits for the mover.
  auto state = std::make_shared<RemoteLookup>();
  state->ns = ns->id;
  state->asked = *count;
  keys.erase(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(result.ready_prefix));
  if (keys.size() > kMaxRemoteLookupKeys) keys.resize(kMaxRemoteLookupKeys);
  state->local = std::move(result);
  ctx.resume_state = state;
  const bool asked = store.StartRemoteLookup(state->ns, std::move(keys), [state](size_t found) {
    state->found = found;
    state->answered.store(true, std::memory_order_release);
  });
  // Not asked (a node-local namespace, never published): the local prefix is the answer, now,
  // not after the wait for the mover runs out.
  if (!asked) state->answered.store(true, std::memory_order_release);
  return FinishRemoteLookup(ctx);
}

Progress Put(CommandContext& ctx, Command& cmd) {
  std::optional<KvtNamespace> ns = ParseKvtNamespace(ctx, cmd.args[1]);
  if (!ns) return Progress::kDone;
  const size_t count = cmd.args[2].size() / 16;
  if (!ctx.started) {
    if (!CheckPackedKeys(ctx, cmd.args[2])) return Progress::kDone;
    if (count != cmd.size() - 3) {
      ctx.reply.AppendError("ERR wrong number of blocks: " + std::to_string(count) + " keys, " +
                            std::to_string(cmd.size() - 3) + " blocks");
      return Progress::kDone;
    }
    if (!ns->known) {
      AppendUnknownNamespace(ctx, ns->id);
      return Progress::kDone;
    }
    ctx.reply.AppendArrayHeader(count);
    ctx.started = true;
  }
  ctx.Time(metrics::RequestOp::kPut, metrics::RequestPath::kInline);
  // Resumable: a block that waits for room (the mover is making it) is tried again from there.
  for (; ctx.cursor < count; ++ctx.cursor) {
    const std::string& block = cmd.args[3 + ctx.cursor];
    uint64_t reservation = 0;
    Status st =
        ctx.server.store.Put(ns->id, PackedKey(cmd.args[2], ctx.cursor),
                             std::as_bytes(std::span(block.data(), block.size())), &reservation);
    if (ctx.WaitsForMover(st)) return Progress::kRetryLater;
    if (st.ok()) {
      ctx.NoteCommit(reservation, ctx.reply.buffer()->size());  // its word comes next
      ctx.Found(ctx.server.store.put_tier());
    }
    ctx.reply.AppendSimpleString(StatusWord(st.code()));
    std::string().swap(cmd.args[3 + ctx.cursor]);  // stored: give the payload's memory back now
  }
  return Progress::kDone;
}

// Resumable: payloads are copied into the reply, which may outgrow the in-flight limit.
Progress Get(CommandContext& ctx, Command& cmd) {
  std::optional<KvtNamespace> ns;
  if (!ctx.started) {
    ns = ParseKvtNamespace(ctx, cmd.args[1]);
    std::optional<size_t> count = ns ? CheckPackedKeys(ctx, cmd.args[2]) : std::nullopt;
    if (!count) return Progress::kDone;
    ctx.reply.AppendArrayHeader(*count);
    ctx.stopped = !ns->known;
    ctx.started = true;
  } else {
    ns = KvtNamespace{*ParseNamespaceId(cmd.args[1]), true};
  }
  const size_t count = cmd.args[2].size() / 16;
  ctx.Time(metrics::RequestOp::kGet, metrics::RequestPath::kInline);
  for (; ctx.cursor < count; ++ctx.cursor) {
    if (ctx.OutputFull()) return Progress::kMore;
    const bool waited = ctx.WaitedForMover();
    Result<store::Lease> lease =
        ctx.stopped ? Result<store::Lease>(NotFound("after a miss"))
                    : AcquireForReply(ctx, ns->id, PackedKey(cmd.args[2], ctx.cursor),
                                      store::Store::Reader::kHostMemory);
    // On NVMe: the mover reads it up while this connection waits (and the thread serves others).
    ctx.FoundPending(lease.status());
    if (ctx.WaitsForMover(lease.status())) {
      if (!waited) PrefetchRestOfPrefix(ctx, ns->id, cmd.args[2], ctx.cursor + 1, count);
      return Progress::kRetryLater;
    }
    // A block is only useful with its whole prefix: after the first miss, nothing more is read.
    Status st = lease.ok() ? AppendLeasedBulk(ctx, *lease, 0) : lease.status();
    // In place on NVMe: read on a disk-read thread while this connection waits.
    if (ctx.WaitsForMover(st)) return Progress::kRetryLater;
    if (st.ok()) ctx.Found(lease->tier);
    if (!st.ok()) {
      ctx.stopped = true;
      ctx.reply.AppendNull();
    }
  }
  return Progress::kDone;
}

Progress Pin(CommandContext& ctx, Command& cmd) {
  std::optional<KvtNamespace> ns = ParseKvtNamespace(ctx, cmd.args[1]);
  if (!ns) return Progress::kDone;
  std::optional<size_t> count = CheckPackedKeys(ctx, cmd.args[2]);
  if (!count) return Progress::kDone;
  std::optional<uint64_t> ttl_ms = ParseUint64(cmd.args[3]);
  // Beyond ~292,000 years the microsecond deadline would overflow.
  if (!ttl_ms || *ttl_ms > (uint64_t{1} << 53)) {
    ctx.reply.AppendError(kNotAnInteger);
    return Progress::kDone;
  }
  int64_t pinned = 0;
  for (size_t i = 0; ns->known && i < *count; ++i) {
    pinned += ctx.server.store.Pin(ns->id, PackedKey(cmd.args[2], i), *ttl_ms * 1000).ok();
  }
  ctx.reply.AppendInteger(pinned);
  return Progress::kDone;
}

// KVT.REFRESH <ns> <keys>: the chain's cached prefix back in a lookup's order, not counted as a
// lookup or a use (Store::Refresh). Reply: the prefix's length.
Progress Refresh(CommandContext& ctx, Command& cmd) {
  std::optional<KvtNamespace> ns = ParseKvtNamespace(ctx, cmd.args[1]);
  if (!ns) return Progress::kDone;
  std::optional<size_t> count = CheckPackedKeys(ctx, cmd.args[2]);
  if (!count) return Progress::kDone;
  const size_t prefix =
      ns->known ? ctx.server.store.Refresh(ns->id, PackedKeys(cmd.args[2], 0, *count)) : 0;
  ctx.reply.AppendInteger(static_cast<int64_t>(prefix));
  return Progress::kDone;
}

Progress Del(CommandContext& ctx, Command& cmd) {
  std::optional<KvtNamespace> ns = ParseKvtNamespace(ctx, cmd.args[1]);
  if (!ns) return Progress::kDone;
  std::optional<size_t> count = CheckPackedKeys(ctx, cmd.args[2]);
  if (!count) return Progress::kDone;
  int64_t removed = 0;
  for (size_t i = 0; ns->known && i < *count; ++i) {
    removed += ctx.server.store.Remove(ns->id, PackedKey(cmd.args[2], i)).ok();
  }
  ctx.reply.AppendInteger(removed);
  return Progress::kDone;
}

constexpr CommandSpec kCommands[] = {
    {"KVT.REGISTER", -3, false, KvtRegister},
    {"KVT.DROP", 2, false, Drop},
    {"KVT.LOOKUP", -3, false, Lookup},
    {"KVT.REFRESH", 3, false, Refresh},
    {"KVT.PUT", -4, false, Put},
    {"KVT.GET", 3, false, Get},
    {"KVT.PIN", 4, false, Pin},
    {"KVT.DEL", 3, false, Del},
    {"KVT.STATS", 1, false, KvtStats},
    {"KVT.EXPLAIN", -4, false, KvtExplain},
    {"KVT.QUOTA", -2, false, KvtQuota},
};

}  // namespace

std::span<const CommandSpec> KvtCommands() { return kCommands; }

}  // namespace kvtier::server
