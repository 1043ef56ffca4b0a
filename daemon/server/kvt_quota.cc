// KVT.QUOTA: an admin's view and changes of the tenant quotas (daemon/store/quota_table.h).
//
//   KVT.QUOTA SET TENANT <salt> <tier> <size>     a tenant's quota in gpu, host or nvme
//   KVT.QUOTA SET NAMESPACE <id> <tier> <size>    one namespace's (32 hex digits)
//   KVT.QUOTA GET                                 every rule, with the bytes it holds now
//
// <size> is a byte count or a size ("8GiB"); 0 clears the quota in that tier. Admin only
// (Session::admin): the answers name tenant salts, which the salt's owners keep from each other.
#include <string>

#include "common/resp/protocol.h"
#include "common/units.h"
#include "daemon/server/commands.h"
#include "daemon/server/kvt_args.h"
#include "daemon/server/wire.h"
#include "daemon/store/store.h"

namespace kvtier::server {
namespace {

using resp::EqualsIgnoreCase;

// gpu, host or nvme, in any case; nullopt otherwise (the remote tier takes no quota).
std::optional<TierId> QuotaTier(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  const std::optional<TierId> tier = TierFromName(lower);
  return tier == TierId::kRemote ? std::nullopt : tier;
}

void Set(CommandContext& ctx, const resp::Command& cmd) {
  if (cmd.size() != 6) {
    ctx.reply.AppendError(
        "ERR KVT.QUOTA SET TENANT|NAMESPACE <salt or id> <gpu|host|nvme> <size>");
    return;
  }
  store::QuotaSubject who;
  if (EqualsIgnoreCase(cmd.args[2], "TENANT")) {
    who.kind = store::QuotaSubject::Kind::kTenant;
    who.tenant = std::string(cmd.args[3]);
    if (who.tenant.empty()) {
      ctx.reply.AppendError("ERR a tenant salt is not empty");
      return;
    }
  } else if (EqualsIgnoreCase(cmd.args[2], "NAMESPACE")) {
    std::optional<NamespaceId> ns = ParseNamespaceId(cmd.args[3]);
    if (!ns) {
      ctx.reply.AppendError("ERR a namespace id is 32 hex digits");
      return;
    }
    who.kind = store::QuotaSubject::Kind::kNamespace;
    who.ns = *ns;
  } else {
    ctx.reply.AppendError("ERR KVT.QUOTA SET takes TENANT or NAMESPACE");
    return;
  }
  const std::optional<TierId> tier = QuotaTier(cmd.args[4]);
  if (!tier) {
    ctx.reply.AppendError("ERR unknown tier '" + std::string(cmd.args[4]) +
                          "' (expected gpu, host or nvme)");
    return;
  }
  Result<uint64_t> bytes = ParseBytes(cmd.args[5]);
  if (!bytes.ok()) {
    ctx.reply.AppendError("ERR size: " + bytes.status().message());
    return;
  }
  if (Status st = ctx.server.store.SetQuota(who, *tier, *bytes); !st.ok()) {
    AppendStatusError(ctx.reply, st);
    return;
  }
  ctx.reply.AppendSimpleString("OK");
}

// One map per rule and tier with a quota there: subject, tier, quota_bytes, used_bytes.
void Get(CommandContext& ctx) {
  struct Line {
    std::string subject;
    TierId tier;
    uint64_t quota;
    uint64_t used;
  };
  std::vector<Line> lines;
  for (const store::Store::QuotaReport& r : ctx.server.store.Quotas()) {
    for (size_t t = 0; t < kTierCount; ++t) {
      if (r.quota_bytes[t] == 0) continue;
      lines.push_back({r.subject.ToString(), static_cast<TierId>(t), r.quota_bytes[t],
                       r.used_bytes[t]});
    }
  }
  ctx.reply.AppendArrayHeader(lines.size());
  for (const Line& line : lines) {
    ctx.reply.AppendMapHeader(4);
    ctx.reply.AppendBulk("subject");
    ctx.reply.AppendBulk(line.subject);
    ctx.reply.AppendBulk("tier");
    ctx.reply.AppendBulk(TierName(line.tier));
    ctx.reply.AppendBulk("quota_bytes");
    ctx.reply.AppendInteger(static_cast<int64_t>(line.quota));
    ctx.reply.AppendBulk("used_bytes");
    ctx.reply.AppendInteger(static_cast<int64_t>(line.used));
  }
}

}  // namespace

Progress KvtQuota(CommandContext& ctx, resp::Command& cmd) {
  if (!ctx.session.admin()) {
    ctx.reply.AppendError(
        "NOPERM KVT.QUOTA is for an admin: root or the daemon's user, on the Unix socket");
    return Progress::kDone;
  }
  if (EqualsIgnoreCase(cmd.args[1], "SET")) {
    Set(ctx, cmd);
  } else if (EqualsIgnoreCase(cmd.args[1], "GET") && cmd.size() == 2) {
    Get(ctx);
  } else {
    ctx.reply.AppendError("ERR KVT.QUOTA GET | SET TENANT|NAMESPACE <salt or id> <tier> <size>");
  }
  return Progress::kDone;
}

}  // namespace kvtier::server
