// Key-space commands of the generic key space, as Redis 7 answers them: SCAN, KEYS, TYPE, STRLEN,
// MEMORY USAGE, TTL, PTTL, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, PERSIST, FLUSHDB and FLUSHALL.
// They read and change the names and expiry times in GenericKeys (generic_keys.h); the values stay
// in the store.
//
// FLUSHDB and FLUSHALL empty the generic key space only: the blocks that engines store under
// their own namespaces (KVT.*) are a cache the Redis commands never list, and stay.
#include <algorithm>
#include <charconv>
#include <optional>
#include <string>
#include <vector>

#include "daemon/server/commands.h"
#include "daemon/server/generic_keyspace.h"
#include "daemon/server/generic_values.h"
#include "daemon/server/wire.h"
#include "daemon/store/store.h"

namespace kvtier::server {
namespace {

using resp::Command;

// SCAN's COUNT when none is given, as in Redis.
constexpr size_t kDefaultScanCount = 10;

// SCAN [MATCH pattern] [COUNT n] [TYPE t], KEYS: which live keys to list.
struct KeyFilter {
  std::string_view pattern = "*";
  bool strings = true;  // false: TYPE named another type, which no generic key has
};

// Walks the key space from `cursor` for about `budget` entries (SettleKeys), appending the live
// names that pass `filter` to `names`. Returns the next cursor.
uint64_t ListKeys(ServerContext& server, uint64_t cursor, size_t budget, const KeyFilter& filter,
                  std::vector<std::string>& names) {
  return SettleKeys(server, cursor, budget, [&](const GenericKeys::Entry& entry) {
    if (filter.strings && GlobMatches(filter.pattern, entry.name)) names.push_back(entry.name);
  });
}

void AppendNames(resp::ReplyWriter& reply, const std::vector<std::string>& names) {
  reply.AppendArrayHeader(names.size());
  for (const std::string& name : names) reply.AppendBulk(name);
}

Progress Scan(CommandContext& ctx, Command& cmd) {
  // Redis takes the cursor as an unsigned 64-bit number; ours are the upper halves of block keys.
  const std::string_view text = cmd.args[1];
  uint64_t from = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), from);
  if (error != std::errc() || end != text.data() + text.size()) {
    ctx.reply.AppendError("ERR invalid cursor");
    return Progress::kDone;
  }
  KeyFilter filter;
  size_t count = kDefaultScanCount;
  for (size_t i = 2; i < cmd.size(); i += 2) {
    const std::string_view option = cmd.args[i];
    if (i + 1 >= cmd.size()) {
      ctx.reply.AppendError("ERR syntax error");
      return Progress::kDone;
    }
    const std::string_view value = cmd.args[i + 1];
    if (resp::EqualsIgnoreCase(option, "MATCH")) {
      filter.pattern = value;
    } else if (resp::EqualsIgnoreCase(option, "COUNT")) {
      const std::optional<int64_t> n = resp::ParseInt64(value);
      if (!n) {
        ctx.reply.AppendError("ERR value is not an integer or out of range");
        return Progress::kDone;
      }
      if (*n < 1) {
        ctx.reply.AppendError("ERR syntax error");
        return Progress::kDone;
      }
      count = static_cast<size_t>(*n);
    } else if (resp::EqualsIgnoreCase(option, "TYPE")) {
      filter.strings = resp::EqualsIgnoreCase(value, "string");
    } else {
      ctx.reply.AppendError("ERR syntax error");
      return Progress::kDone;
    }
  }
  // COUNT is a hint (as in Redis): held to limits.max_keys_reply, so that one call cannot walk
  // and send the whole key space that KEYS refuses to.
  count = std::min(count, std::max(kDefaultScanCount, ctx.server.options.max_keys_reply));
  std::vector<std::string> names;
  const uint64_t next = ListKeys(ctx.server, from, count, filter, names);
  ctx.reply.AppendArrayHeader(2);
  ctx.reply.AppendBulk(std::to_string(next));
  AppendNames(ctx.reply, names);
  return Progress::kDone;
}

Progress Keys(CommandContext& ctx, Command& cmd) {
  const size_t limit = ctx.server.options.max_keys_reply;
  if (const size_t keys = ctx.server.generic_keys.size(); keys > limit) {
    ctx.reply.AppendError("ERR KEYS refused: the key space holds " + std::to_string(keys) +
                          " keys, more than limits.max_keys_reply (" + std::to_string(limit) +
                          "); use SCAN");
    return Progress::kDone;
  }
  std::vector<std::string> names;
  (void)ListKeys(ctx.server, 0, SIZE_MAX, KeyFilter{.pattern = cmd.args[1]}, names);
  AppendNames(ctx.reply, names);
  return Progress::kDone;
}

Progress Type(CommandContext& ctx, Command& cmd) {
  if (KeyTooLong(ctx, cmd.args[1])) return Progress::kDone;
  const GenericKeyRef key = RefOf(ctx.server, cmd.args[1]);
  MutexLock lock(key.stripe.lock);
  ctx.reply.AppendSimpleString(LiveEntry(ctx.server, key, UnixNowMs()) ? "string" : "none");
  return Progress::kDone;
}

// STRLEN: the value's length (0 for a key that does not exist), from the index: nothing is read.
// redis-cli --bigkeys sizes string keys with it.
Progress StrLen(CommandContext& ctx, Command& cmd) {
  if (KeyTooLong(ctx, cmd.args[1])) return Progress::kDone;
  const GenericKeyRef key = RefOf(ctx.server, cmd.args[1]);
  MutexLock lock(key.stripe.lock);
  uint64_t length = 0;
  store::StoredSize block;
  if (LiveEntry(ctx.server, key, UnixNowMs(), &block) != nullptr &&
      block.bytes >= kGenericValueHeaderBytes) {
    length = block.bytes - kGenericValueHeaderBytes;
  }
  ctx.reply.AppendInteger(static_cast<int64_t>(length));
  return Progress::kDone;
}

// MEMORY USAGE key [SAMPLES n]: the bytes the value takes in the tier that holds it (its block,
// header included, as that tier lays it out: the slot a memory tier gives it, or on NVMe its record
// header and alignment) plus the key's name; nil for a key that does not exist. SAMPLES is
// checked as Redis does and has nothing to sample. The index's own bytes per block are INFO's.
// redis-cli --memkeys sizes keys with it.
Progress MemoryUsage(CommandContext& ctx, Command& cmd) {
  for (size_t i = 3; i < cmd.size(); i += 2) {
    if (!resp::EqualsIgnoreCase(cmd.args[i], "SAMPLES") || i + 1 >= cmd.size()) {
      ctx.reply.AppendError("ERR syntax error");
      return Progress::kDone;
    }
    const std::optional<int64_t> samples = resp::ParseInt64(cmd.args[i + 1]);
    if (!samples) {
      ctx.reply.AppendError("ERR value is not an integer or out of range");
      return Progress::kDone;
    }
    if (*samples < 0) {
      ctx.reply.AppendError("ERR syntax error");
      return Progress::kDone;
    }
  }
  if (KeyTooLong(ctx, cmd.args[2])) return Progress::kDone;
  const GenericKeyRef key = RefOf(ctx.server, cmd.args[2]);
  MutexLock lock(key.stripe.lock);
  store::StoredSize block;
  if (LiveEntry(ctx.server, key, UnixNowMs(), &block) != nullptr) {
    const uint64_t footprint = ctx.server.store.FootprintOf(block.tier, block.bytes);
    ctx.reply.AppendInteger(static_cast<int64_t>(footprint + cmd.args[2].size()));
  } else {
    ctx.reply.AppendNull();
  }
  return Progress::kDone;
}

// MEMORY, as Redis 7 answers it, for USAGE and HELP.
Progress Memory(CommandContext& ctx, Command& cmd) {
  const std::string sub = resp::ToUpperAscii(cmd.args[1]);
  if (sub == "USAGE") {
    if (cmd.size() >= 3) return MemoryUsage(ctx, cmd);
    ctx.reply.AppendError("ERR wrong number of arguments for 'memory|usage' command");
    return Progress::kDone;
  }
  if (sub == "HELP" && cmd.size() == 2) {
    ctx.reply.AppendArrayHeader(2);
    ctx.reply.AppendSimpleString("USAGE <key> [SAMPLES <count>]");
    ctx.reply.AppendSimpleString(
        "    The bytes <key>'s value takes in its tier, plus the key's name.");
    return Progress::kDone;
  }
  ctx.reply.AppendError("ERR unknown subcommand '" + std::string(cmd.args[1].substr(0, 128)) +
                        "'. Try MEMORY HELP.");
  return Progress::kDone;
}

// TTL and PTTL: -2 for a key that does not exist, -1 for one without an expiry.
Progress RemainingTime(CommandContext& ctx, Command& cmd, bool seconds) {
  if (KeyTooLong(ctx, cmd.args[1])) return Progress::kDone;
  const GenericKeyRef key = RefOf(ctx.server, cmd.args[1]);
  MutexLock lock(key.stripe.lock);
  const uint64_t now_ms = UnixNowMs();
  const GenericKeys::Entry* entry = LiveEntry(ctx.server, key, now_ms);
  if (entry == nullptr) {
    ctx.reply.AppendInteger(-2);
  } else if (entry->expires_at_ms == 0) {
    ctx.reply.AppendInteger(-1);
  } else {
    const auto left_ms = static_cast<int64_t>(entry->expires_at_ms - now_ms);
    ctx.reply.AppendInteger(seconds ? (left_ms + 500) / 1000 : left_ms);  // Redis rounds TTL
  }
  return Progress::kDone;
}

Progress Ttl(CommandContext& ctx, Command& cmd) { return RemainingTime(ctx, cmd, true); }
Progress PTtl(CommandContext& ctx, Command& cmd) { return RemainingTime(ctx, cmd, false); }

// EXPIRE's conditions (Redis 7): NX only without an expiry, XX only with one, GT/LT only when the
// new time is later/earlier (no expiry counts as later than any time).
struct ExpireCondition {
  bool nx = false, xx = false, gt = false, lt = false;
  bool Allows(uint64_t current_ms, int64_t new_ms) const {
    if (nx && current_ms != 0) return false;
    if (xx && current_ms == 0) return false;
    if (gt && (current_ms == 0 || new_ms <= static_cast<int64_t>(current_ms))) return false;
    if (lt && current_ms != 0 && new_ms >= static_cast<int64_t>(current_ms)) return false;
    return true;
  }
};

// Parses EXPIRE's options; nullopt after writing Redis' error.
std::optional<ExpireCondition> ParseExpireCondition(CommandContext& ctx, const Command& cmd) {
  ExpireCondition c;
  for (size_t i = 3; i < cmd.size(); ++i) {
    const std::string_view arg = cmd.args[i];
    bool* flag = resp::EqualsIgnoreCase(arg, "NX")   ? &c.nx
                 : resp::EqualsIgnoreCase(arg, "XX") ? &c.xx
                 : resp::EqualsIgnoreCase(arg, "GT") ? &c.gt
                 : resp::EqualsIgnoreCase(arg, "LT") ? &c.lt
                                                     : nullptr;
    if (flag == nullptr) {
      ctx.reply.AppendError("ERR Unsupported option " + std::string(arg));
      return std::nullopt;
    }
    *flag = true;
  }
  if (c.nx && (c.xx || c.gt || c.lt)) {
    ctx.reply.AppendError("ERR NX and XX, GT or LT options at the same time are not compatible");
    return std::nullopt;
  }
  if (c.gt && c.lt) {
    ctx.reply.AppendError("ERR GT and LT options at the same time are not compatible");
    return std::nullopt;
  }
  return c;
}

// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: 1 when the expiry was set (a time already past deletes the
// key), 0 when the key does not exist or a condition kept it. Resumable: a past time for a value a
// reader still leases waits for it, as DEL does.
Progress SetExpiry(CommandContext& ctx, Command& cmd, bool seconds, bool absolute) {
  const std::optional<int64_t> n = resp::ParseInt64(cmd.args[2]);
  if (!n) {
    ctx.reply.AppendError("ERR value is not an integer or out of range");
    return Progress::kDone;
  }
  const std::optional<ExpireCondition> condition = ParseExpireCondition(ctx, cmd);
  if (!condition) return Progress::kDone;
  if (KeyTooLong(ctx, cmd.args[1])) return Progress::kDone;
  const uint64_t now_ms = UnixNowMs();
  const std::optional<int64_t> at = ExpiryTime(*n, seconds, absolute, now_ms);
  if (!at) {
    ctx.reply.AppendError("ERR invalid expire time in '" + resp::ToLowerAscii(cmd.name()) +
                          "' command");
    return Progress::kDone;
  }
  const GenericKeyRef key = RefOf(ctx.server, cmd.args[1]);
  MutexLock lock(key.stripe.lock);
  GenericKeys::Entry* entry = LiveEntry(ctx.server, key, now_ms);
  if (entry == nullptr || !condition->Allows(entry->expires_at_ms, *at)) {
    ctx.reply.AppendInteger(0);
    return Progress::kDone;
  }
  if (*at > static_cast<int64_t>(now_ms)) {
    entry->expires_at_ms = static_cast<uint64_t>(*at);
    ctx.reply.AppendInteger(1);
    return Progress::kDone;
  }
  const Status removed = RemoveValue(ctx.server, key);
  if (removed.code() == StatusCode::kBusy && ctx.KeepWaitingForReaders()) {
    return Progress::kRetryLater;
  }
  if (removed.code() == StatusCode::kBusy) entry->expires_at_ms = 1;  // gone for every reader
  ctx.reply.AppendInteger(1);
  return Progress::kDone;
}

Progress Expire(CommandContext& ctx, Command& cmd) { return SetExpiry(ctx, cmd, true, false); }
Progress PExpire(CommandContext& ctx, Command& cmd) { return SetExpiry(ctx, cmd, false, false); }
Progress ExpireAt(CommandContext& ctx, Command& cmd) { return SetExpiry(ctx, cmd, true, true); }
Progress PExpireAt(CommandContext& ctx, Command& cmd) { return SetExpiry(ctx, cmd, false, true); }

Progress Persist(CommandContext& ctx, Command& cmd) {
  if (KeyTooLong(ctx, cmd.args[1])) return Progress::kDone;
  const GenericKeyRef key = RefOf(ctx.server, cmd.args[1]);
  MutexLock lock(key.stripe.lock);
  GenericKeys::Entry* entry = LiveEntry(ctx.server, key, UnixNowMs());
  const bool had_expiry = entry != nullptr && entry->expires_at_ms != 0;
  if (had_expiry) entry->expires_at_ms = 0;
  ctx.reply.AppendInteger(had_expiry ? 1 : 0);
  return Progress::kDone;
}

// FLUSHDB and FLUSHALL [ASYNC|SYNC]: removes every generic value (the ones listed, and those from
// before a restart that no command has named yet). Both modes remove before answering. Values that
// readers still lease are waited for, as DEL waits, and so is the adoption of the blocks found on
// NVMe at a restart (they could be values); if either lasts past reader_wait_ms, BUSY says so.
Progress Flush(CommandContext& ctx, Command& cmd) {
  if (cmd.size() > 2 || (cmd.size() == 2 && !resp::EqualsIgnoreCase(cmd.args[1], "ASYNC") &&
                         !resp::EqualsIgnoreCase(cmd.args[1], "SYNC"))) {
    ctx.reply.AppendError("ERR syntax error");
    return Progress::kDone;
  }
  ServerContext& server = ctx.server;
  // Every value, named or not (from before a restart), then the entries of those gone.
  const uint64_t leased = server.store.RemoveAll(server.generic_ns).leased;
  (void)SettleKeys(server, 0, SIZE_MAX);
  // Values from before a restart still joining the index would come back after the flush.
  const uint64_t loading = server.store.pending_adoptions();
  if ((leased > 0 || loading > 0) && ctx.KeepWaitingForReaders()) return Progress::kRetryLater;
  if (loading > 0) {
    ctx.reply.AppendError("BUSY the cache from before the restart is still being loaded (" +
                          std::to_string(loading) + " blocks); flush again");
  } else if (leased > 0) {
    ctx.reply.AppendError("BUSY " + std::to_string(leased) +
                          " values are still being read by other clients; flush again");
  } else {
    ctx.reply.AppendSimpleString("OK");
  }
  return Progress::kDone;
}

constexpr CommandSpec kCommands[] = {
    {"SCAN", -2, false, Scan},
    {"KEYS", 2, false, Keys},
    {"TYPE", 2, false, Type},
    {"STRLEN", 2, false, StrLen},
    {"MEMORY", -2, false, Memory},
    {"TTL", 2, false, Ttl},
    {"PTTL", 2, false, PTtl},
    {"EXPIRE", -3, false, Expire},
    {"PEXPIRE", -3, false, PExpire},
    {"EXPIREAT", -3, false, ExpireAt},
    {"PEXPIREAT", -3, false, PExpireAt},
    {"PERSIST", 2, false, Persist},
    {"FLUSHDB", -1, false, Flush},
    {"FLUSHALL", -1, false, Flush},
};

}  // namespace

std::span<const CommandSpec> KeyspaceCommands() { return kCommands; }

}  // namespace kvtier::server
