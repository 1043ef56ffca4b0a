// KVT.EXPLAIN: block by block, whether the blocks of a prompt are here (and in which tier) and,
// for each missing one, why: its departure from the store's log (evicted, corrupt, removed,
// namespace dropped), never stored, or held under a namespace that differs in one field.
//
// The other-namespace check needs the tokens (a key names its namespace, so keys alone cannot be
// re-hashed under another one) and the asked namespace's descriptor (from its registration, or
// given as fields). It looks only at registered namespaces with the same tenant salt that differ
// in exactly one other field: telling a tenant that a namespace with another salt holds its
// prompt would reveal another tenant's cache, which the salt exists to prevent (docs/protocol.md).
#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "daemon/server/commands.h"
#include "daemon/server/kvt_args.h"
#include "daemon/server/wire.h"
#include "daemon/store/store.h"
#include "hashing/block_hasher.h"
#include "hashing/namespace_descriptor.h"

namespace kvtier::server {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

// The descriptor field never compared across namespaces (see the header comment).
constexpr std::string_view kSaltField = store::NamespaceInfo::kTenantSaltField;
// Other namespaces one EXPLAIN re-hashes the prompt under: each costs a chain of hashes and an
// index probe per block. Registered namespaces are few; this bounds a daemon that has many.
constexpr size_t kMaxOtherNamespaces = 16;

struct ExplainRequest {
  NamespaceId ns;
  bool registered = false;
  std::vector<BlockKey> keys;
  std::vector<uint32_t> tokens;  // empty for KEYS
  uint32_t tokens_per_block = 0;
  Fields fields;        // the asked namespace's descriptor; empty when unknown
  size_t max_keys = 0;  // max_lookup_keys
  // Whether the other namespaces' ids may be named: the asker gave the fields (salt included), so
  // it could compute them, or it is an admin. Otherwise their refs: an id is enough to read and
  // drop a namespace's blocks, and the fields came from the registration.
  bool names_ids = false;
};

// A namespace that differs from the asked one in one field, and where it holds each asked block.
struct Elsewhere {
  std::string field;
  std::string value;
  NamespaceId ns;
  std::vector<std::optional<TierId>> tiers;  // per asked block
};

// The parsers below write the error reply and return false on a bad request.

// KEYS <keys>: the keys as given.
bool ParseKeys(CommandContext& ctx, const resp::Command& cmd, ExplainRequest& req) {
  if (cmd.size() != 4) {
    ctx.reply.AppendError("ERR KVT.EXPLAIN <ns> KEYS <keys> takes no fields");
    return false;
  }
  std::optional<size_t> count = CheckPackedKeys(ctx, cmd.args[3]);
  if (!count) return false;
  req.keys = PackedKeys(cmd.args[3], 0, *count);
  return true;
}

// The asked namespace's descriptor and block size: from the fields after the tokens (which must
// hash to <ns>), or from its registration.
bool DescribeNamespace(CommandContext& ctx, const resp::Command& cmd, ExplainRequest& req) {
  if (cmd.size() > 4) {
    Result<hashing::NamespaceDescriptor> desc = ParseNamespaceFields(cmd, 4);
    if (!desc.ok()) {
      AppendStatusError(ctx.reply, desc.status());
      return false;
    }
    if (hashing::ComputeNamespaceId(*desc).value() != req.ns) {
      ctx.reply.AppendError("ERR the fields describe another namespace than " + req.ns.ToHex());
      return false;
    }
    req.fields = NamespaceFields(*desc);
    req.tokens_per_block = desc->tokens_per_block;
    req.names_ids = true;
    return true;
  }
  std::optional<store::NamespaceInfo> info = ctx.server.store.GetNamespace(req.ns);
  if (!req.registered || !info || info->tokens_per_block == 0) {
    ctx.reply.AppendError("NOTFOUND namespace " + req.ns.ToHex() +
                          " is not registered: give its fields to explain tokens");
    return false;
  }
  req.fields = info->fields;
  req.tokens_per_block = info->tokens_per_block;
  req.names_ids = ctx.session.admin();
  return true;
}

// TOKENS <tokens> [field value ...]: the tokens, and the keys of their full blocks.
bool ParseTokens(CommandContext& ctx, const resp::Command& cmd, ExplainRequest& req) {
  const std::string_view packed = cmd.args[3];
  if (packed.size() % 4 != 0 || cmd.size() % 2 != 0) {
    ctx.reply.AppendError(packed.size() % 4 != 0
                              ? "ERR packed tokens must be a multiple of 4 bytes"
                              : "ERR wrong number of arguments for 'kvt.explain' command");
    return false;
  }
  if (!DescribeNamespace(ctx, cmd, req)) return false;
  if (hashing::NumFullBlocks(packed.size() / 4, req.tokens_per_block) > req.max_keys) {
    ctx.reply.AppendError("ERR too many keys");
    return false;
  }
  req.tokens.resize(packed.size() / 4);
  for (size_t i = 0; i < req.tokens.size(); ++i) {
    uint8_t b[4];
    std::memcpy(b, packed.data() + 4 * i, 4);
    req.tokens[i] =
        uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
  }
  req.keys = hashing::ChainKeys(req.ns, req.tokens, req.tokens_per_block).value();
  return true;
}

std::optional<ExplainRequest> ParseRequest(CommandContext& ctx, const resp::Command& cmd) {
  std::optional<KvtNamespace> ns = ParseKvtNamespace(ctx, cmd.args[1]);
  if (!ns) return std::nullopt;
  if (ns->id == ctx.server.generic_ns) {
    ctx.reply.AppendError("ERR the generic namespace has no blocks to explain");
    return std::nullopt;
  }
  ExplainRequest req;
  req.ns = ns->id;
  req.registered = ns->known;
  req.max_keys = ctx.server.options.max_lookup_keys;
  const std::string_view mode = cmd.args[2];
  bool ok = false;
  if (resp::EqualsIgnoreCase(mode, "KEYS")) {
    ok = ParseKeys(ctx, cmd, req);
  } else if (resp::EqualsIgnoreCase(mode, "TOKENS")) {
    ok = ParseTokens(ctx, cmd, req);
  } else {
    ctx.reply.AppendError("ERR KVT.EXPLAIN: expected KEYS or TOKENS");
  }
  if (!ok) return std::nullopt;
  return req;
}

// The one field in which `other` differs from `asked`, or nullptr (none, several, or the salt).
const std::pair<std::string, std::string>* OnlyDifference(const Fields& asked,
                                                          const Fields& other) {
  if (asked.empty() || asked.size() != other.size()) return nullptr;
  const std::pair<std::string, std::string>* diff = nullptr;
  for (size_t i = 0; i < asked.size(); ++i) {
    if (asked[i].first != other[i].first) return nullptr;
    if (asked[i].second == other[i].second) continue;
    if (diff != nullptr || asked[i].first == kSaltField) return nullptr;
    diff = &other[i];
  }
  return diff;
}

// Where namespace `other` holds the tokens of each asked block: every one of its blocks that
// overlaps the asked block's tokens must be present (its block size may differ).
std::vector<std::optional<TierId>> TiersUnder(const store::Store& store, const ExplainRequest& req,
                                              const store::NamespaceInfo& other) {
  std::vector<std::optional<TierId>> out(req.keys.size());
  // At most max_lookup_keys blocks, as for the asked namespace: a namespace of much smaller
  // blocks would otherwise make one EXPLAIN hash millions of them. Blocks past those are not
  // reported as held.
  std::vector<BlockKey> keys(
      std::min(hashing::NumFullBlocks(req.tokens.size(), other.tokens_per_block), req.max_keys));
  Result<size_t> n = hashing::ChainKeysInto(other.id, req.tokens, other.tokens_per_block, keys);
  if (!n.ok() || *n == 0) return out;
  const std::vector<std::optional<TierId>> where = store.Where(other.id, keys);
  const uint64_t asked = req.tokens_per_block, theirs = other.tokens_per_block;
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t first = i * asked / theirs, end = ((i + 1) * asked + theirs - 1) / theirs;
    if (end > where.size()) break;
    bool all = true;
    for (uint64_t j = first; j < end; ++j) all &= where[j].has_value();
    if (all) out[i] = where[first];
  }
  return out;
}

std::vector<Elsewhere> FindElsewhere(const store::Store& store, const ExplainRequest& req) {
  std::vector<Elsewhere> found;
  if (req.tokens.empty() || req.fields.empty()) return found;
  for (const store::NamespaceInfo& other : store.Namespaces()) {
    if (other.id == req.ns || other.tokens_per_block == 0) continue;
    const std::pair<std::string, std::string>* diff = OnlyDifference(req.fields, other.fields);
    if (diff == nullptr) continue;
    found.push_back(Elsewhere{diff->first, diff->second, other.id, {}});
  }
  // A stable order, whatever the registry's: by field, then by namespace id.
  std::sort(found.begin(), found.end(), [](const Elsewhere& a, const Elsewhere& b) {
    return std::tie(a.field, a.ns) < std::tie(b.field, b.ns);
  });
  if (found.size() > kMaxOtherNamespaces) found.resize(kMaxOtherNamespaces);
  for (Elsewhere& e : found) {
    std::optional<store::NamespaceInfo> info = store.GetNamespace(e.ns);
    if (info) e.tiers = TiersUnder(store, req, *info);
  }
  return found;
}

void AppendPair(resp::ReplyWriter& reply, std::string_view name, std::string_view value) {
  reply.AppendBulk(name);
  reply.AppendBulk(value);
}

void AppendPair(resp::ReplyWriter& reply, std::string_view name, uint64_t value) {
  reply.AppendBulk(name);
  reply.AppendInteger(static_cast<int64_t>(value));
}

void AppendBlock(CommandContext& ctx, const ExplainRequest& req, const BlockKey& key,
                 const store::BlockExplanation& ex, const std::vector<const Elsewhere*>& elsewhere,
                 size_t i) {
  using State = store::BlockExplanation::State;
  resp::ReplyWriter& reply = ctx.reply;
  const std::optional<store::Departure>& d = ex.departure;
  const bool evicted = d && d->reason == store::DepartureReason::kEvicted;
  size_t pairs = 3;  // key, state, and tier or reason
  if (ex.state == State::kAbsent) pairs += (d ? 2 : 0) + (evicted ? 4 : 0) + !elsewhere.empty();
  reply.AppendMapHeader(pairs);
  AppendPair(reply, "key", key.ToHex());
  if (ex.state != State::kAbsent) {
    AppendPair(reply, "state", ex.state == State::kPresent ? "present" : "writing");
    AppendPair(reply, "tier", TierName(ex.tier));
    return;
  }
  AppendPair(reply, "state", "missing");
  const std::string_view reason = d                   ? store::DepartureReasonName(d->reason)
                                  : elsewhere.empty() ? "never_stored"
                                                      : "other_namespace";
  AppendPair(reply, "reason", reason);
  if (d) {
    AppendPair(reply, "tier", TierName(d->tier));
    AppendPair(reply, "age_us", ex.departed_age_us);
  }
  if (evicted) {
    AppendPair(reply, "policy", ctx.server.store.eviction_policy(d->tier));
    AppendPair(reply, "cause", store::EvictionCauseName(d->cause));
    AppendPair(reply, "tier_used_bytes", d->tier_used_bytes);
    AppendPair(reply, "tier_capacity_bytes", d->tier_capacity_bytes);
  }
  if (elsewhere.empty()) return;
  reply.AppendBulk("elsewhere");
  reply.AppendArrayHeader(elsewhere.size());
  for (const Elsewhere* e : elsewhere) {
    reply.AppendMapHeader(4);
    AppendPair(reply, "field", e->field);
    AppendPair(reply, "value", e->value);
    if (req.names_ids) {
      AppendPair(reply, "ns", e->ns.ToHex());
    } else {
      AppendPair(reply, "ref", hashing::NamespaceRef(e->ns));
    }
    AppendPair(reply, "tier", TierName(*e->tiers[i]));
  }
}

}  // namespace

Progress KvtExplain(CommandContext& ctx, resp::Command& cmd) {
  std::optional<ExplainRequest> req = ParseRequest(ctx, cmd);
  if (!req) return Progress::kDone;
  const store::Store& store = ctx.server.store;
  const std::vector<store::BlockExplanation> explained = store.Explain(req->ns, req->keys);
  const std::vector<Elsewhere> elsewhere = FindElsewhere(store, *req);
  const store::DepartureLog& log = store.departures();
  ctx.reply.AppendMapHeader(6);
  AppendPair(ctx.reply, "ns", req->ns.ToHex());
  ctx.reply.AppendBulk("registered");
  ctx.reply.AppendBoolean(req->registered);
  AppendPair(ctx.reply, "policy", store.eviction_policy(store.put_tier()));
  AppendPair(ctx.reply, "log_entries", log.capacity());
  AppendPair(ctx.reply, "log_recorded", log.recorded());
  ctx.reply.AppendBulk("blocks");
  ctx.reply.AppendArrayHeader(req->keys.size());
  std::vector<const Elsewhere*> here;
  for (size_t i = 0; i < req->keys.size(); ++i) {
    here.clear();
    for (const Elsewhere& e : elsewhere) {
      if (i < e.tiers.size() && e.tiers[i]) here.push_back(&e);
    }
    AppendBlock(ctx, *req, req->keys[i], explained[i], here, i);
  }
  return Progress::kDone;
}

}  // namespace kvtier::server
