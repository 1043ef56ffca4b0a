#include "daemon/server/info.h"

#include <unistd.h>

#include <array>
#include <exception>
#include <string>

#include "common/clock.h"
#include "common/version.h"
#include "daemon/store/store.h"

namespace kvtier::server {
namespace {

constexpr std::array<std::string_view, 6> kSections = {"server", "memory",   "clients",
                                                       "stats",  "keyspace", "kvtier"};

void Field(std::string& out, std::string_view name, const std::string& value) {
  out.append(name).append(":").append(value).append("\r\n");
}

void Field(std::string& out, std::string_view name, uint64_t value) {
  Field(out, name, std::to_string(value));
}

uint64_t UptimeSeconds(const ServerContext& server) {
  return (SteadyClock::Instance().NowMicros() - server.start_time_us) / 1'000'000;
}

void ServerSection(const ServerContext& server, std::string& out) {
  Field(out, "kvtier_version", std::string(kVersion));
  Field(out, "redis_mode", std::string("standalone"));
  Field(out, "process_id", static_cast<uint64_t>(getpid()));
  Field(out, "tcp_port", server.tcp_port);
  Field(out, "unix_socket", server.options.unix_path);
  Field(out, "io_threads", static_cast<uint64_t>(server.options.io_threads));
  Field(out, "uptime_in_seconds", UptimeSeconds(server));
}

void MemorySection(const store::StoreStats& stats, std::string& out) {
  uint64_t used = 0;
  uint64_t capacity = 0;
  for (const store::TierStatsSnapshot& t : stats.tiers) {
    used += t.space.used_bytes;
    capacity += t.space.capacity_bytes;
  }
  Field(out, "used_memory", used);
  Field(out, "maxmemory", capacity);
  Field(out, "maxmemory_policy", std::string("allkeys-lru"));
}

void ClientsSection(const ServerContext& server, std::string& out) {
  Field(out, "connected_clients", server.counters.connected_clients.load());
  Field(out, "maxclients", server.options.max_clients);
  // No command blocks a client (no BLPOP and the like); redis-cli --stat prints a garbage count
  // when the field is missing.
  Field(out, "blocked_clients", uint64_t{0});
}

void StatsSection(const ServerContext& server, const store::StoreStats& stats, std::string& out) {
  Field(out, "total_connections_received", server.counters.total_connections.load());
  Field(out, "total_commands_processed", server.counters.commands_processed.load());
  Field(out, "rejected_connections", server.counters.rejected_connections.load());
  Field(out, "failed_accepts", server.counters.failed_accepts.load());
  Field(out, "total_error_replies_protocol", server.counters.protocol_errors.load());
  Field(out, "lapsed_reply_leases", server.counters.lapsed_reply_leases.load());
  Field(out, "stalled_reply_closes", server.counters.stalled_reply_closes.load());
  Field(out, "staged_set_values", server.counters.staged_values.load());
  Field(out, "evicted_keys", stats.evicted_blocks);
}

void AppendSection(const ServerContext& server, const store::StoreStats& stats,
                   std::string_view name, std::string& out) {
  if (!out.empty()) out.append("\r\n");
  std::string title(name);
  title[0] = static_cast<char>(title[0] - 'a' + 'A');
  out.append("# ").append(title).append("\r\n");
  if (name == "server") ServerSection(server, out);
  if (name == "memory") MemorySection(stats, out);
  if (name == "clients") ClientsSection(server, out);
  if (name == "stats") StatsSection(server, stats, out);
  if (name == "keyspace") {
    Field(out, "db0", "keys=" + std::to_string(stats.blocks_present) + ",expires=0,avg_ttl=0");
  }
  if (name == "kvtier") {
    out.append(metrics::StatsToInfoSection(stats, MakeProcessInfo(server)));
  }
}

bool WantsAll(const resp::Command& cmd) {
  if (cmd.size() == 1) return true;
  for (size_t i = 1; i < cmd.size(); ++i) {
    for (std::string_view all : {"all", "default", "everything"}) {
      if (resp::EqualsIgnoreCase(cmd.args[i], all)) return true;
    }
  }
  return false;
}

bool Wants(const resp::Command& cmd, std::string_view section) {
  for (size_t i = 1; i < cmd.size(); ++i) {
    if (resp::EqualsIgnoreCase(cmd.args[i], section)) return true;
  }
  return false;
}

}  // namespace

Progress Info(CommandContext& ctx, resp::Command& cmd) {
  const store::StoreStats stats = ctx.server.store.Stats();
  const bool all = WantsAll(cmd);
  std::string text;
  for (std::string_view section : kSections) {
    if (all || Wants(cmd, section)) AppendSection(ctx.server, stats, section, text);
  }
  ctx.reply.AppendVerbatim(text);
  return Progress::kDone;
}

metrics::ProcessInfo MakeProcessInfo(const ServerContext& server) {
  metrics::ProcessInfo p;
  p.version = std::string(kVersion);
  p.uptime_s = UptimeSeconds(server);
  p.connected_clients = server.counters.connected_clients.load();
  p.total_connections = server.counters.total_connections.load();
  p.commands_processed = server.counters.commands_processed.load();
  p.protocol_errors = server.counters.protocol_errors.load();
  p.lapsed_reply_leases = server.counters.lapsed_reply_leases.load();
  p.stalled_reply_closes = server.counters.stalled_reply_closes.load();
  p.staged_set_values = server.counters.staged_values.load();
  p.rejected_connections = server.counters.rejected_connections.load();
  p.failed_accepts = server.counters.failed_accepts.load();
  p.gpu_tier_note = server.options.gpu_tier_note;
  p.nvme_tier_note = server.options.nvme_tier_note;
  p.requests = server.request_latency.Snapshot();
  return p;
}

Progress KvtStats(CommandContext& ctx, resp::Command&) {
  std::string json;
  try {
    // Namespace ids only to an admin: with one, a client can read and drop that namespace.
    json = metrics::StatsToJson(
        ctx.server.store.Stats(), MakeProcessInfo(ctx.server),
        ctx.session.admin() ? metrics::NamespaceIds::kShown : metrics::NamespaceIds::kHidden);
  } catch (const std::exception& e) {
    // An exception out of a handler ends the connection, and with it the client's leases and
    // pipelined commands: a report that cannot be rendered is an error reply instead.
    ctx.reply.AppendError(std::string("ERR stats: ") + e.what());
    return Progress::kDone;
  }
  ctx.reply.AppendBulk(json);
  return Progress::kDone;
}

}  // namespace kvtier::server
