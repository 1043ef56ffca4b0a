// Generic commands on the values of the generic key space (generic_keyspace.h): SET (with its
// NX, XX, GET and expiry options), SETNX, GET, GETDEL, GETEX, MSET, MGET, EXISTS, DEL, UNLINK,
// DBSIZE, TIME. The key-space commands (SCAN, TTL, EXPIRE, FLUSHDB, ...) are in
// commands_keyspace.cc, INFO in info.cc.
#include <chrono>
#include <cstring>
#include <limits>
#include <vector>

#include "common/stream_copy.h"
#include "daemon/server/commands.h"
#include "daemon/server/generic_keyspace.h"
#include "daemon/server/generic_values.h"
#include "daemon/server/info.h"
#include "daemon/server/wire.h"
#include "daemon/store/store.h"

namespace kvtier::server {
namespace {

using resp::Command;

// SET removes the old value and puts the new one under the key's stripe lock, so no other generic
// writer comes in between; the retry only covers a block put there by other means.
constexpr int kSetAttempts = 4;

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

// Replaces the value of `key`, whose stripe lock the caller holds: removes the old block, then
// `publish(block_key)` stores the new one (kAlreadyExists: a block came back in between; it is
// removed again), and enters the key with `expires_at_ms`. false (nothing changed): the old value
// is leased by a reader, most likely a GET still sending it; the caller waits and tries again.
template <typename Publish>
Result<bool> ReplaceValue(CommandContext& ctx, const GenericKeyRef& key, uint64_t expires_at_ms,
                          Publish&& publish) REQUIRES(key.stripe.lock) {
  store::Store& store = ctx.server.store;
  if (ctx.server.generic_keys.Find(key.stripe, key.block) == nullptr &&
      ctx.server.generic_keys.name_bytes() + key.name.size() >
          ctx.server.options.max_generic_name_bytes) {
    return Busy("the generic key space's names take " +
                std::to_string(ctx.server.generic_keys.name_bytes()) +
                " bytes, limits.max_generic_name_bytes (" +
                std::to_string(ctx.server.options.max_generic_name_bytes) +
                "): delete keys or raise it");
  }
  for (int attempt = 0; attempt < kSetAttempts; ++attempt) {
    Status removed = store.Remove(ctx.server.generic_ns, key.block);
    if (removed.code() == StatusCode::kBusy) return false;
    if (!removed.ok() && removed.code() != StatusCode::kNotFound) return removed;
    Status published = publish(key.block);
    if (published.code() == StatusCode::kAlreadyExists) continue;
    if (!published.ok()) {
      // The old value is gone whatever happened to the new one.
      ctx.server.generic_keys.Forget(key.stripe, key.block);
      return published;
    }
    ctx.server.generic_keys.Record(key.stripe, key.block, key.name, expires_at_ms);
    return true;
  }
  return Busy("the key is being replaced concurrently");
}

// Stores `value` under `key`, replacing the old value; results as ReplaceValue. The new value is
// reserved (under a placeholder key) and written before the old one is removed: a put that has to
// wait for the mover's room (kPending) then waits with the old value in place, and the call made
// again finds the key as it was (SET XX, GET and KEEPTTL read it).
Result<bool> StoreValue(CommandContext& ctx, const GenericKeyRef& key, std::string_view value,
                        uint64_t expires_at_ms) REQUIRES(key.stripe.lock) {
  store::Store& store = ctx.server.store;
  KVTIER_ASSIGN_OR_RETURN(const store::Reservation r,
                          store.BeginPut(ctx.server.generic_ns, ctx.server.PlaceholderKey(),
                                         kGenericValueHeaderBytes + value.size()));
  if (Status st = WriteReservation(store, r, value); !st.ok()) {
    (void)store.AbortPut(r.id);
    return st;
  }
  bool published = false;
  Result<bool> replaced =
      ReplaceValue(ctx, key, expires_at_ms, [&](const BlockKey& block_key) -> Status {
        KVTIER_RETURN_IF_ERROR(store.CommitPutAs(r.id, block_key));
        published = true;
        ctx.NoteCommit(r.id);
        ctx.Found(r.tier);
        return Status::Ok();
      });
  // Not published (the old value is being read, an error): the slot goes back. A reservation
  // CommitPutAs used up answers NOTFOUND here.
  if (!published) (void)store.AbortPut(r.id);
  return replaced;
}

// Publishes a value received into a reserved slot (CommandContext::staged_value) under `key`,
// replacing the old value; results as ReplaceValue. The reservation is left to the caller when
// the answer is "wait for readers" or the key is another namespace's; otherwise it is used up
// (published, or gone with the error).
Result<bool> PublishStagedValue(CommandContext& ctx, const GenericKeyRef& key, uint64_t reservation)
    REQUIRES(key.stripe.lock) {
  return ReplaceValue(ctx, key, 0, [&](const BlockKey& block_key) {
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

// Appends the value of `key`, whose stripe lock the caller holds (so a SET never finds the old
// value leased by a reader that has not started, and a GET never sees the gap between a SET's
// remove and its commit), as a bulk string. kNotFound (nothing appended) on a miss, an expired
// value included; another error (nothing appended) when the stored block is not a generic value.
// Whether `key` has a value to read at `now_ms`: one the mover has read up for this command, or a
// live entry.
bool HasValue(CommandContext& ctx, const GenericKeyRef& key, uint64_t now_ms)
    REQUIRES(key.stripe.lock) {
  return ctx.disk_read.Reads(key.block) || LiveEntry(ctx.server, key, now_ms) != nullptr;
}

Status AppendValue(CommandContext& ctx, const GenericKeyRef& key) REQUIRES(key.stripe.lock) {
  if (!HasValue(ctx, key, UnixNowMs())) {
    return NotFound("no such key");
  }
  // Read into the reply, from host memory: its reads never promote the value to the GPU pool.
  Result<store::Lease> lease =
      AcquireForReply(ctx, ctx.server.generic_ns, key.block, store::Store::Reader::kHostMemory);
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

// AppendValue, copied into the reply rather than sent from its slot (ctx.leased set aside): for a
// command that replaces or removes the value right after (SET ... GET, GETDEL).
Status AppendValueCopy(CommandContext& ctx, const GenericKeyRef& key) REQUIRES(key.stripe.lock) {
  LeasedOutput* leased = std::exchange(ctx.leased, nullptr);
  const Status st = AppendValue(ctx, key);
  ctx.leased = leased;
  return st;
}

// A value that failed verification is gone (dropped): a miss, like any other; so is one still on
// NVMe when the wait ran out.
bool ReadsAsMiss(const Status& st) {
  return st.code() == StatusCode::kNotFound || st.code() == StatusCode::kChecksumMismatch ||
         st.code() == StatusCode::kPending;
}

// The answer of GET, GETDEL or GETEX to a read (AppendValue) that did not succeed: kRetryLater
// while the mover reads the value up from NVMe, else null for a miss or the error. nullopt when
// the read succeeded and the command goes on.
std::optional<Progress> AnswerUnsuccessfulRead(CommandContext& ctx, const Status& st) {
  if (ctx.WaitsForMover(st)) return Progress::kRetryLater;
  if (st.ok()) return std::nullopt;
  if (ReadsAsMiss(st)) {
    ctx.reply.AppendNull();
  } else {
    AppendStatusError(ctx.reply, st);
  }
  return Progress::kDone;
}

Status ReadersDidNotFinish() { return Busy("the old value is still being read by another client"); }

// SET's options, as Redis 7 takes them.
struct SetOptions {
  bool if_absent = false;                 // NX
  bool if_present = false;                // XX
  bool get = false;                       // GET: answer the old value
  bool keep_ttl = false;                  // KEEPTTL
  std::optional<uint64_t> expires_at_ms;  // EX, PX, EXAT, PXAT: Unix milliseconds
};

// The Unix time in milliseconds that an expiry option (EX, PX, EXAT, PXAT) with `value` names at
// `now_ms`; nullopt after writing Redis' error (not an integer, not above 0, or out of range).
// Only an absolute time (EXAT, PXAT) may be in the past.
std::optional<int64_t> ParseExpiryOption(CommandContext& ctx, std::string_view option,
                                         std::string_view value, std::string_view command,
                                         uint64_t now_ms) {
  const std::optional<int64_t> n = resp::ParseInt64(value);
  if (!n) {
    ctx.reply.AppendError("ERR value is not an integer or out of range");
    return std::nullopt;
  }
  const bool seconds = (option[0] | 0x20) == 'e';  // EX, EXAT; PX, PXAT are milliseconds
  const bool absolute = option.size() == 4;
  const std::optional<int64_t> at =
      *n > 0 ? ExpiryTime(*n, seconds, absolute, now_ms) : std::nullopt;
  if (!at)
    ctx.reply.AppendError("ERR invalid expire time in '" + std::string(command) + "' command");
  return at;
}

bool IsExpiryOption(std::string_view arg) {
  return resp::EqualsIgnoreCase(arg, "EX") || resp::EqualsIgnoreCase(arg, "PX") ||
         resp::EqualsIgnoreCase(arg, "EXAT") || resp::EqualsIgnoreCase(arg, "PXAT");
}

// Parses SET's options after the value, as Redis 7 does (an option given twice is taken again,
// the last one winning, and only the last expiry's number is read, after every option was checked;
// NX with XX, or two kinds of expiry, is a syntax error); nullopt after writing Redis' error.
std::optional<SetOptions> ParseSetOptions(CommandContext& ctx, const Command& cmd) {
  SetOptions o;
  std::string_view expiry_kind;  // EX, PX, EXAT or PXAT, once one was given
  std::string_view expiry;       // the last one's number
  for (size_t i = 3; i < cmd.size(); ++i) {
    const std::string_view arg = cmd.args[i];
    const bool is_expiry = IsExpiryOption(arg);
    if (resp::EqualsIgnoreCase(arg, "NX") && !o.if_present) {
      o.if_absent = true;
    } else if (resp::EqualsIgnoreCase(arg, "XX") && !o.if_absent) {
      o.if_present = true;
    } else if (resp::EqualsIgnoreCase(arg, "GET")) {
      o.get = true;
    } else if (resp::EqualsIgnoreCase(arg, "KEEPTTL") && expiry_kind.empty()) {
      o.keep_ttl = true;
    } else if (is_expiry && i + 1 < cmd.size() && !o.keep_ttl &&
               (expiry_kind.empty() || resp::EqualsIgnoreCase(arg, expiry_kind))) {
      expiry_kind = arg;
      expiry = cmd.args[++i];
    } else {
      ctx.reply.AppendError("ERR syntax error");
      return std::nullopt;
    }
  }
  if (!expiry_kind.empty()) {
    const std::optional<int64_t> at =
        ParseExpiryOption(ctx, expiry_kind, expiry, "set", UnixNowMs());
    if (!at) return std::nullopt;
    o.expires_at_ms = static_cast<uint64_t>(*at);
  }
  return o;
}

// How SET answers, and how SETNX does (1 when it stored the value, 0 when the key existed).
enum class SetReply : uint8_t { kOk, kInteger };

// One call of SET or SETNX (it may be called again after kRetryLater): under the key's lock,
// answers the old value for GET, honours NX/XX, and replaces the value.
Progress SetWith(CommandContext& ctx, Command& cmd, const std::optional<SetOptions>& o,
                 SetReply reply) {
  if (!o) return Progress::kDone;
  if (KeyTooLong(ctx, cmd.args[1])) return Progress::kDone;
  ctx.Time(metrics::RequestOp::kPut, metrics::RequestPath::kGeneric);
  const GenericKeyRef key = RefOf(ctx.server, cmd.args[1]);
  MutexLock lock(key.stripe.lock);
  const size_t reply_mark = ctx.reply.buffer()->size();
  // Either `retry`, with the reply taken back to where this call found it, or kDone.
  auto retry = [&] {
    ctx.reply.buffer()->resize(reply_mark);
    return Progress::kRetryLater;
  };
  const GenericKeys::Entry* entry = LiveEntry(ctx.server, key, UnixNowMs());
  bool exists = entry != nullptr;
  uint64_t old_expiry = exists ? entry->expires_at_ms : 0;
  if (o->get && exists) {
    const Status st = AppendValueCopy(ctx, key);
    if (ctx.WaitsForMover(st)) return retry();
    if (!st.ok() && !ReadsAsMiss(st)) {
      AppendStatusError(ctx.reply, st);
      return Progress::kDone;
    }
    exists = st.ok();
    if (!exists) old_expiry = 0;  // the old value turned out gone: KEEPTTL keeps nothing
  }
  if (o->get && !exists) ctx.reply.AppendNull();
  if ((o->if_absent && exists) || (o->if_present && !exists)) {
    if (reply == SetReply::kInteger) {
      ctx.reply.AppendInteger(0);
    } else if (!o->get) {
      ctx.reply.AppendNull();
    }
    return Progress::kDone;
  }
  const uint64_t expires_at_ms = o->keep_ttl ? old_expiry : o->expires_at_ms.value_or(0);
  // A large value may have been received into its slot already (staged_value.h); the
  // connection aborts that slot if this ends without publishing it.
  Result<bool> stored = ctx.staged_value ? PublishStagedValue(ctx, key, *ctx.staged_value)
                                         : StoreValue(ctx, key, cmd.args[2], expires_at_ms);
  if (stored.ok() && !*stored && ctx.KeepWaitingForReaders()) return retry();
  if (ctx.WaitsForMover(stored.status())) return retry();
  if (stored.ok() && *stored) {
    if (reply == SetReply::kInteger) {
      ctx.reply.AppendInteger(1);
    } else if (!o->get) {
      ctx.reply.AppendSimpleString("OK");
    }
  } else {
    ctx.reply.buffer()->resize(reply_mark);
    AppendStatusError(ctx.reply, stored.ok() ? ReadersDidNotFinish() : stored.status());
  }
  return Progress::kDone;
}

Progress Set(CommandContext& ctx, Command& cmd) {
  return SetWith(ctx, cmd, ParseSetOptions(ctx, cmd), SetReply::kOk);
}

// SETNX key value: SET key value NX, answered 1 or 0 (deprecated in Redis, still sent by tools).
Progress SetNx(CommandContext& ctx, Command& cmd) {
  return SetWith(ctx, cmd, SetOptions{.if_absent = true}, SetReply::kInteger);
}

Progress Get(CommandContext& ctx, Command& cmd) {
  if (KeyTooLong(ctx, cmd.args[1])) return Progress::kDone;
  ctx.Time(metrics::RequestOp::kGet, metrics::RequestPath::kGeneric);
  const GenericKeyRef key = RefOf(ctx.server, cmd.args[1]);
  MutexLock lock(key.stripe.lock);
  // On NVMe: the mover reads it up while this connection waits (and the thread serves others).
  return AnswerUnsuccessfulRead(ctx, AppendValue(ctx, key)).value_or(Progress::kDone);
}

// After the value of `key` was copied into the reply (from reply_mark on): removes the key, for
// GETDEL and GETEX with a time past. While another client still reads it, the value is taken back
// out of the reply and the command asked again later; past reader_wait_ms, the reply is the value
// all the same and the key is left expired, gone for every reader, as EXPIREAT leaves it (its
// room comes back once the readers are done: the key sweep removes it).
Progress RemoveAfterReply(CommandContext& ctx, const GenericKeyRef& key, size_t reply_mark)
    REQUIRES(key.stripe.lock) {
  const Status removed = RemoveValue(ctx.server, key);
  // Evicted since it was read (eviction does not take the key's lock): gone all the same, and
  // the value read is the answer.
  if (removed.ok() || removed.code() == StatusCode::kNotFound) return Progress::kDone;
  const bool busy = removed.code() == StatusCode::kBusy;
  if (busy && ctx.KeepWaitingForReaders()) {
    ctx.reply.buffer()->resize(reply_mark);
    return Progress::kRetryLater;
  }
  if (busy) {
    // Expired at 1 ms past the epoch: gone for every reader, never revived by a later option.
    ctx.server.generic_keys.Record(key.stripe, key.block, key.name, 1);
    return Progress::kDone;
  }
  ctx.reply.buffer()->resize(reply_mark);
  AppendStatusError(ctx.reply, removed);
  return Progress::kDone;
}

// GETDEL key: the value, then the key removed, under the key's lock (no SET in between). The
// value is copied into the reply rather than sent from its slot, which the removal gives back.
Progress GetDel(CommandContext& ctx, Command& cmd) {
  if (KeyTooLong(ctx, cmd.args[1])) return Progress::kDone;
  ctx.Time(metrics::RequestOp::kGet, metrics::RequestPath::kGeneric);
  const GenericKeyRef key = RefOf(ctx.server, cmd.args[1]);
  MutexLock lock(key.stripe.lock);
  const size_t reply_mark = ctx.reply.buffer()->size();
  if (std::optional<Progress> p = AnswerUnsuccessfulRead(ctx, AppendValueCopy(ctx, key))) return *p;
  return RemoveAfterReply(ctx, key, reply_mark);
}

// GETEX's options (Redis 6.2): a new expiry, PERSIST, or none (then it is GET). The expiry's
// number is checked only once the key is found, as Redis does (a missing key is null whatever it
// says).
struct GetExOptions {
  bool persist = false;
  std::string_view expiry_option;  // EX, PX, EXAT or PXAT; empty: none
  std::string_view expiry_value;   // the last one given
};

// As Redis parses them: one kind of expiry or PERSIST, the same one given again taken again;
// nullopt after writing Redis' error.
std::optional<GetExOptions> ParseGetExOptions(CommandContext& ctx, const Command& cmd) {
  GetExOptions o;
  for (size_t i = 2; i < cmd.size(); ++i) {
    const std::string_view arg = cmd.args[i];
    if (resp::EqualsIgnoreCase(arg, "PERSIST") && o.expiry_option.empty()) {
      o.persist = true;
    } else if (IsExpiryOption(arg) && i + 1 < cmd.size() && !o.persist &&
               (o.expiry_option.empty() || resp::EqualsIgnoreCase(arg, o.expiry_option))) {
      o.expiry_option = arg;
      o.expiry_value = cmd.args[++i];
    } else {
      ctx.reply.AppendError("ERR syntax error");
      return std::nullopt;
    }
  }
  return o;
}

// GETEX key [EX s | PX ms | EXAT t | PXAT t | PERSIST]: the value, and its expiry set or cleared
// under the key's lock. An EXAT or PXAT already past removes the key after reading it, as GETDEL
// does (the value copied into the reply, not sent from its slot).
Progress GetEx(CommandContext& ctx, Command& cmd) {
  const std::optional<GetExOptions> o = ParseGetExOptions(ctx, cmd);
  if (!o) return Progress::kDone;
  if (KeyTooLong(ctx, cmd.args[1])) return Progress::kDone;
  ctx.Time(metrics::RequestOp::kGet, metrics::RequestPath::kGeneric);
  const GenericKeyRef key = RefOf(ctx.server, cmd.args[1]);
  MutexLock lock(key.stripe.lock);
  const uint64_t now_ms = UnixNowMs();
  if (!HasValue(ctx, key, now_ms)) {
    ctx.reply.AppendNull();
    return Progress::kDone;
  }
  std::optional<int64_t> expires_at_ms;
  if (!o->expiry_option.empty()) {
    expires_at_ms = ParseExpiryOption(ctx, o->expiry_option, o->expiry_value, "getex", now_ms);
    if (!expires_at_ms) return Progress::kDone;
  }
  const bool removes = expires_at_ms && *expires_at_ms <= static_cast<int64_t>(now_ms);
  const size_t reply_mark = ctx.reply.buffer()->size();
  const Status st = removes ? AppendValueCopy(ctx, key) : AppendValue(ctx, key);
  if (std::optional<Progress> p = AnswerUnsuccessfulRead(ctx, st)) return *p;
  if (removes) return RemoveAfterReply(ctx, key, reply_mark);
  // The value was read under this lock: its entry is there (LiveEntry records one for a value
  // from before a restart).
  if (GenericKeys::Entry* entry = LiveEntry(ctx.server, key, now_ms); entry != nullptr) {
    if (o->persist) entry->expires_at_ms = 0;
    if (expires_at_ms) entry->expires_at_ms = static_cast<uint64_t>(*expires_at_ms);
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
    const GenericKeyRef key = RefOf(ctx.server, cmd.args[ctx.cursor]);
    MutexLock lock(key.stripe.lock);
    Result<bool> stored = StoreValue(ctx, key, cmd.args[ctx.cursor + 1], 0);
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
    const GenericKeyRef key = RefOf(ctx.server, cmd.args[ctx.cursor]);
    MutexLock lock(key.stripe.lock);
    const Status st = AppendValue(ctx, key);
    if (ctx.WaitsForMover(st)) return Progress::kRetryLater;
    if (!st.ok()) ctx.reply.AppendNull();
  }
  return Progress::kDone;
}

// Counts the keys named that exist now (a key named twice counts twice), as Redis does; touches
// no value's recency.
Progress Exists(CommandContext& ctx, Command& cmd) {
  if (AnyKeyTooLong(ctx, cmd, 1, 1)) return Progress::kDone;
  ctx.Time(metrics::RequestOp::kLookup, metrics::RequestPath::kGeneric);
  const uint64_t now_ms = UnixNowMs();
  int64_t found = 0;
  for (size_t i = 1; i < cmd.size(); ++i) {
    const GenericKeyRef key = RefOf(ctx.server, cmd.args[i]);
    MutexLock lock(key.stripe.lock);
    store::StoredSize stored;
    if (LiveEntry(ctx.server, key, now_ms, &stored) == nullptr) continue;
    ++found;
    ctx.Found(stored.tier);
  }
  ctx.reply.AppendInteger(found);
  return Progress::kDone;
}

// DEL and UNLINK. Resumable like MSET: a key whose value is being read is retried later; one still
// read after reader_wait_ms stays and is not counted.
Progress Del(CommandContext& ctx, Command& cmd) {
  if (ctx.cursor == 0) {
    if (AnyKeyTooLong(ctx, cmd, 1, 1)) return Progress::kDone;
    ctx.cursor = 1;
  }
  const uint64_t now_ms = UnixNowMs();
  for (; ctx.cursor < cmd.size(); ++ctx.cursor) {
    const GenericKeyRef key = RefOf(ctx.server, cmd.args[ctx.cursor]);
    MutexLock lock(key.stripe.lock);
    // An expired key is removed on the way and not counted, as in Redis.
    if (LiveEntry(ctx.server, key, now_ms) == nullptr) continue;
    Status removed = RemoveValue(ctx.server, key);
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

// TIME: the server's clock as Unix seconds and the microseconds within that second.
Progress ServerTime(CommandContext& ctx, Command&) {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count();
  ctx.reply.AppendArrayHeader(2);
  ctx.reply.AppendBulk(std::to_string(us / 1'000'000));
  ctx.reply.AppendBulk(std::to_string(us % 1'000'000));
  return Progress::kDone;
}

constexpr CommandSpec kCommands[] = {
    {"SET", -3, false, Set},      {"SETNX", 3, false, SetNx},    {"GET", 2, false, Get},
    {"GETDEL", 2, false, GetDel}, {"GETEX", -2, false, GetEx},   {"MSET", -3, false, MSet},
    {"MGET", -2, false, MGet},    {"EXISTS", -2, false, Exists}, {"DEL", -2, false, Del},
    {"UNLINK", -2, false, Del},   {"DBSIZE", 1, false, DbSize},  {"TIME", 1, false, ServerTime},
    {"INFO", -1, false, Info},
};

}  // namespace

std::span<const CommandSpec> GenericCommands() { return kCommands; }

}  // namespace kvtier::server
