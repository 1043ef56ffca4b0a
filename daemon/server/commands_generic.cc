// Generic commands: SET, GET, MSET, MGET, EXISTS, DEL, DBSIZE on the generic key space
// (generic_keyspace.h). INFO lives in info.cc.
#include <cstring>
#include <vector>

#include "common/stream_copy.h"
#include "daemon/server/commands.h"
#include "daemon/server/generic_keyspace.h"
#include "daemon/server/info.h"
#include "daemon/server/wire.h"
#include "daemon/store/store.h"

namespace kvtier::server {
namespace {

using resp::Command;

// SET removes the old value and puts the new one under the key's write lock, so no other generic
// writer comes in between; the retry only covers a block put there by other means.
constexpr int kSetAttempts = 4;

bool KeyTooLong(CommandContext& ctx, std::string_view key) {
  if (key.size() <= ctx.server.options.max_key_bytes) return false;
  ctx.reply.AppendError("ERR key too long");
  return true;
}

// True (after writing the error) when any of args[first], args[first + step], ... is too long.
bool AnyKeyTooLong(CommandContext& ctx, const Command& cmd, size_t first, size_t step) {
  for (size_t i = first; i < cmd.size(); i += step) {
    if (KeyTooLong(ctx, cmd.args[i])) return true;
  }
  return false;
}

Status WriteReservation(store::Store& store, const store::Reservation& r, std::string_view value) {
  if (r.address != nullptr) {
    r.address[0] = kGenericValueFormat;
    StreamCopy(r.address + kGenericValueHeaderBytes, value.data(), value.size());
    return Status::Ok();
  }
  // A tier that is not plain memory: stage the block once.
  std::vector<std::byte> block(kGenericValueHeaderBytes + value.size());
  block[0] = kGenericValueFormat;
  std::memcpy(block.data() + kGenericValueHeaderBytes, value.data(), value.size());
  return store.tier(r.tier)->Write(r.extent, block);
}

// Replaces the value of `key` under the key's write lock: removes the old block, then
// `publish(block_key)` stores the new one (kAlreadyExists: a block came back in between; it is
// removed again). false (nothing changed): the old value is leased by a reader, most likely a GET
// still sending it; the caller waits and tries again.
template <typename Publish>
Result<bool> ReplaceValue(CommandContext& ctx, std::string_view key, Publish&& publish) {
  store::Store& store = ctx.server.store;
  const NamespaceId& ns = ctx.server.generic_ns;
  const BlockKey block_key = GenericKey(ns, key);
  MutexLock lock(ctx.server.GenericWriteLock(block_key));
  for (int attempt = 0; attempt < kSetAttempts; ++attempt) {
    Status removed = store.Remove(ns, block_key);
    if (removed.code() == StatusCode::kBusy) return false;
    if (!removed.ok() && removed.code() != StatusCode::kNotFound) return removed;
    Status published = publish(block_key);
    if (published.code() == StatusCode::kAlreadyExists) continue;
    if (!published.ok()) return published;
    return true;
  }
  return Busy("the key is being replaced concurrently");
}

// Stores `value` under `key`, replacing the old value; results as ReplaceValue.
Result<bool> StoreValue(CommandContext& ctx, std::string_view key, std::string_view value) {
  store::Store& store = ctx.server.store;
  return ReplaceValue(ctx, key, [&](const BlockKey& block_key) -> Status {
    KVTIER_ASSIGN_OR_RETURN(
        const store::Reservation r,
        store.BeginPut(ctx.server.generic_ns, block_key, kGenericValueHeaderBytes + value.size()));
    if (Status st = WriteReservation(store, r, value); !st.ok()) {
      (void)store.AbortPut(r.id);
      return st;
    }
    KVTIER_RETURN_IF_ERROR(store.CommitPut(r.id));
    ctx.NoteCommit(r.id);
    ctx.Found(r.tier);
    return Status::Ok();
  });
}

// Publishes a value received into a reserved slot (CommandContext::staged_value) under `key`,
// replacing the old value; results as ReplaceValue. The reservation is left to the caller when
// the answer is "wait for readers" or the key is another namespace's; otherwise it is used up
// (published, or gone with the error).
Result<bool> PublishStagedValue(CommandContext& ctx, std::string_view key, uint64_t reservation) {
  return ReplaceValue(ctx, key, [&](const BlockKey& block_key) {
    Status published = ctx.server.store.CommitPutAs(reservation, block_key);
    // A staged value's slot was reserved where puts land (staged_value.h).
    if (published.ok()) {
      ctx.NoteCommit(reservation);
      ctx.Found(ctx.server.store.put_tier());
    }
    const StatusCode code = published.code();
    if (code != StatusCode::kAlreadyExists && code != StatusCode::kRejected) {
      (void)ctx.session.TakeReservation(reservation);
      ctx.staged_value.reset();
    }
    return published;
  });
}

// Appends the value of `key` as a bulk string. kNotFound (nothing appended) on a miss; another
// error (nothing appended) when the stored block is not a generic value.
Status AppendValue(CommandContext& ctx, std::string_view key) {
  store::Store& store = ctx.server.store;
  const BlockKey block_key = GenericKey(ctx.server.generic_ns, key);
  // Readers take the key's stripe too: a SET then never finds the old value leased (and never
  // answers BUSY for it), and a GET never sees the gap between a SET's remove and its commit.
  MutexLock lock(ctx.server.GenericWriteLock(block_key));
  // Read into the reply, from host memory: its reads never promote the value to the GPU pool.
  Result<store::Lease> lease = AcquireForReply(ctx, ctx.server.generic_ns, block_key,
                                               store::Store::Reader::kHostMemory);
  ctx.FoundPending(lease.status());
  if (!lease.ok()) return lease.status();
  Status st =
      AppendLeasedBulk(ctx, *lease, kGenericValueHeaderBytes, [](std::span<const std::byte> b) {
        if (b.size() < kGenericValueHeaderBytes || b[0] != kGenericValueFormat) {
          return Corruption("stored value has an unknown format");
        }
        return Status::Ok();
      });
  if (st.ok()) ctx.Found(lease->tier);
  return st;
}

Status ReadersDidNotFinish() { return Busy("the old value is still being read by another client"); }

Progress Set(CommandContext& ctx, Command& cmd) {
  if (cmd.size() > 3) {
    ctx.reply.AppendError("ERR SET options are not supported");
    return Progress::kDone;
  }
  if (KeyTooLong(ctx, cmd.args[1])) return Progress::kDone;
  ctx.Time(metrics::RequestOp::kPut, metrics::RequestPath::kGeneric);
  // A large value may have been received into its slot already (staged_value.h); the
  // connection aborts that slot if this ends without publishing it.
  Result<bool> stored = ctx.staged_value ? PublishStagedValue(ctx, cmd.args[1], *ctx.staged_value)
                                         : StoreValue(ctx, cmd.args[1], cmd.args[2]);
  if (stored.ok() && !*stored && ctx.KeepWaitingForReaders()) return Progress::kRetryLater;
  if (ctx.WaitsForMover(stored.status())) return Progress::kRetryLater;
  if (stored.ok() && *stored) {
    ctx.reply.AppendSimpleString("OK");
  } else {
    AppendStatusError(ctx.reply, stored.ok() ? ReadersDidNotFinish() : stored.status());
  }
  return Progress::kDone;
}

Progress Get(CommandContext& ctx, Command& cmd) {
  if (KeyTooLong(ctx, cmd.args[1])) return Progress::kDone;
  ctx.Time(metrics::RequestOp::kGet, metrics::RequestPath::kGeneric);
  Status st = AppendValue(ctx, cmd.args[1]);
  // On NVMe: the mover reads it up while this connection waits (and the thread serves others).
  if (ctx.WaitsForMover(st)) return Progress::kRetryLater;
  // A value whose stored bytes failed verification is gone (dropped): a miss, like any other; so
  // is one still on NVMe when the wait ran out.
  if (st.code() == StatusCode::kNotFound || st.code() == StatusCode::kChecksumMismatch ||
      st.code() == StatusCode::kPending) {
    ctx.reply.AppendNull();
  } else if (!st.ok()) {
    AppendStatusError(ctx.reply, st);
  }
  return Progress::kDone;
}

Progress MSet(CommandContext& ctx, Command& cmd) {
  if (cmd.size() % 2 != 1) {
    ctx.reply.AppendError("ERR wrong number of arguments for 'mset' command");
    return Progress::kDone;
  }
  if (ctx.cursor == 0) {
    if (AnyKeyTooLong(ctx, cmd, 1, 2)) return Progress::kDone;
    ctx.cursor = 1;
  }
  ctx.Time(metrics::RequestOp::kPut, metrics::RequestPath::kGeneric);
  // Resumable: a pair whose old value is being read is retried later, from that pair on.
  for (; ctx.cursor < cmd.size(); ctx.cursor += 2) {
    Result<bool> stored = StoreValue(ctx, cmd.args[ctx.cursor], cmd.args[ctx.cursor + 1]);
    if (stored.ok() && !*stored && ctx.KeepWaitingForReaders()) return Progress::kRetryLater;
    if (ctx.WaitsForMover(stored.status())) return Progress::kRetryLater;
    Status st = !stored.ok() ? stored.status() : *stored ? Status::Ok() : ReadersDidNotFinish();
    if (!st.ok() && ctx.first_error.ok()) ctx.first_error = st;
  }
  if (ctx.first_error.ok()) {
    ctx.reply.AppendSimpleString("OK");
  } else {
    AppendStatusError(ctx.reply, ctx.first_error);
  }
  return Progress::kDone;
}

// Resumable: values are copied into the reply, which may outgrow the client's in-flight limit.
Progress MGet(CommandContext& ctx, Command& cmd) {
  if (ctx.cursor == 0) {
    if (AnyKeyTooLong(ctx, cmd, 1, 1)) return Progress::kDone;
    ctx.reply.AppendArrayHeader(cmd.size() - 1);
    ctx.cursor = 1;
  }
  ctx.Time(metrics::RequestOp::kGet, metrics::RequestPath::kGeneric);
  for (; ctx.cursor < cmd.size(); ++ctx.cursor) {
    if (ctx.OutputFull()) return Progress::kMore;
    const Status st = AppendValue(ctx, cmd.args[ctx.cursor]);
    if (ctx.WaitsForMover(st)) return Progress::kRetryLater;
    if (!st.ok()) ctx.reply.AppendNull();
  }
  return Progress::kDone;
}

Progress Exists(CommandContext& ctx, Command& cmd) {
  if (AnyKeyTooLong(ctx, cmd, 1, 1)) return Progress::kDone;
  ctx.Time(metrics::RequestOp::kLookup, metrics::RequestPath::kGeneric);
  int64_t found = 0;
  for (size_t i = 1; i < cmd.size(); ++i) {
    const BlockKey key = GenericKey(ctx.server.generic_ns, cmd.args[i]);
    const index::LookupResult result =
        ctx.server.store.Lookup(ctx.server.generic_ns, std::span(&key, 1));
    for (TierId tier : result.tiers) ctx.Found(tier);
    found += static_cast<int64_t>(result.ready_prefix);
  }
  ctx.reply.AppendInteger(found);
  return Progress::kDone;
}

// Resumable like MSET: a key whose value is being read is retried later; one still read after
// reader_wait_ms stays and is not counted.
Progress Del(CommandContext& ctx, Command& cmd) {
  if (ctx.cursor == 0) {
    if (AnyKeyTooLong(ctx, cmd, 1, 1)) return Progress::kDone;
    ctx.cursor = 1;
  }
  for (; ctx.cursor < cmd.size(); ++ctx.cursor) {
    const BlockKey key = GenericKey(ctx.server.generic_ns, cmd.args[ctx.cursor]);
    MutexLock lock(ctx.server.GenericWriteLock(key));
    Status removed = ctx.server.store.Remove(ctx.server.generic_ns, key);
    if (removed.code() == StatusCode::kBusy && ctx.KeepWaitingForReaders()) {
      return Progress::kRetryLater;
    }
    if (removed.ok()) ++ctx.tally;
  }
  ctx.reply.AppendInteger(ctx.tally);
  return Progress::kDone;
}

Progress DbSize(CommandContext& ctx, Command&) {
  ctx.reply.AppendInteger(static_cast<int64_t>(ctx.server.store.PresentBlocks()));
  return Progress::kDone;
}

constexpr CommandSpec kCommands[] = {
    {"SET", -3, false, Set},      {"GET", 2, false, Get},        {"MSET", -3, false, MSet},
    {"MGET", -2, false, MGet},    {"EXISTS", -2, false, Exists}, {"DEL", -2, false, Del},
    {"DBSIZE", 1, false, DbSize}, {"INFO", -1, false, Info},
};

}  // namespace

std::span<const CommandSpec> GenericCommands() { return kCommands; }

}  // namespace kvtier::server
