#include "daemon/server/commands.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace kvtier::server {
namespace {

// Redis truncates quoted names and arguments in its unknown-command message to this many bytes.
constexpr size_t kQuotedBytes = 128;

using Table = std::unordered_map<std::string_view, const CommandSpec*>;

const Table& CommandTable() {
  static const Table table = [] {
    Table t;
    for (auto family : {ConnectionCommands(), GenericCommands(), KeyspaceCommands(), KvtCommands(),
                        KvtShmCommands(), KvtGpuCommands()}) {
      for (const CommandSpec& spec : family) t.emplace(spec.name, &spec);
    }
    return t;
  }();
  return table;
}

// Redis 7's wording, which client libraries and tests match on:
// "ERR unknown command 'foo', with args beginning with: 'a' 'b' ".
void AppendUnknownCommand(resp::ReplyWriter& reply, const resp::Command& cmd) {
  std::string message = "ERR unknown command '";
  message.append(cmd.name().substr(0, kQuotedBytes));
  message.append("', with args beginning with: ");
  size_t budget = kQuotedBytes;
  for (size_t i = 1; i < cmd.size() && budget > 0; ++i) {
    std::string_view arg = std::string_view(cmd.args[i]).substr(0, budget);
    budget -= arg.size();
    message.append("'").append(arg).append("' ");
  }
  reply.AppendError(message);
}

bool ArityMatches(int arity, size_t argc) {
  return arity > 0 ? argc == static_cast<size_t>(arity) : argc >= static_cast<size_t>(-arity);
}

// "Host:" and "POST" open an HTTP request: somebody pointed a browser or a cross-protocol attack
// at the port. Redis closes such connections without a reply; so does kvtierd.
bool LooksLikeHttp(const resp::Command& cmd) { return cmd.NameIs("host:") || cmd.NameIs("post"); }

}  // namespace

const CommandSpec* PrepareCommand(CommandContext& ctx, const resp::Command& cmd) {
  if (LooksLikeHttp(cmd)) {
    ctx.close_after_reply = true;
    return nullptr;
  }
  auto it = CommandTable().find(cmd.UpperName());
  const CommandSpec* spec = it == CommandTable().end() ? nullptr : it->second;
  // Unauthenticated clients learn nothing about the command set, so NOAUTH comes first.
  if (!ctx.session.authenticated() && (spec == nullptr || !spec->before_auth)) {
    ctx.reply.AppendError("NOAUTH Authentication required.");
    return nullptr;
  }
  if (spec == nullptr) {
    AppendUnknownCommand(ctx.reply, cmd);
    return nullptr;
  }
  // Shutdown waits for the clients that map the GPU pool: each of their commands tells them to
  // close the import and detach (or disconnect), except the ways of letting go.
  if (ctx.server.draining_gpu_importers.load(std::memory_order_relaxed) &&
      ctx.session.gpu_pool_attached() && !spec->lets_go_of_gpu_pool) {
    ctx.reply.AppendError(
        "SHUTDOWN kvtierd is stopping: close the GPU pool import, then KVT.GPUDETACH or "
        "disconnect");
    return nullptr;
  }
  if (!ArityMatches(spec->arity, cmd.size())) {
    ctx.reply.AppendError("ERR wrong number of arguments for '" + resp::ToLowerAscii(spec->name) +
                          "' command");
    return nullptr;
  }
  return spec;
}

bool CommandContext::KeepWaitingForReaders() {
  const auto now = std::chrono::steady_clock::now();
  if (waiting_since == std::chrono::steady_clock::time_point{}) waiting_since = now;
  return now - waiting_since < std::chrono::milliseconds(server.options.reader_wait_ms);
}

bool CommandContext::WaitsForMover(const Status& status) {
  if (status.code() != StatusCode::kPending) return false;
  const auto now = std::chrono::steady_clock::now();
  if (mover_waiting_since == std::chrono::steady_clock::time_point{}) mover_waiting_since = now;
  waits_for_mover_now =
      now - mover_waiting_since < std::chrono::milliseconds(server.options.mover_wait_ms);
  return waits_for_mover_now;
}

Result<store::Lease> AcquireForReply(CommandContext& ctx, const NamespaceId& ns,
                                     const BlockKey& key, store::Store::Reader reader) {
  if (ctx.disk_read.Reads(key)) return ctx.disk_read.lease();
  return ctx.server.store.Acquire(ns, key, reader);
}

Status AppendLeasedBulk(CommandContext& ctx, const store::Lease& lease, size_t skip_bytes,
                        const std::function<Status(std::span<const std::byte>)>& check) {
  store::Store& store = ctx.server.store;
  std::vector<std::byte> staged;
  const std::byte* block = lease.address;
  Status st;
  if (block == nullptr) {  // not plain memory: staged by a disk-read thread, verified by its tier
    if (!ctx.disk_read.Reads(lease.key)) ctx.disk_read = ctx.server.disk_reads.Start(lease);
    if (!ctx.disk_read.done()) return Pending("the block is being read from disk");
    st = ctx.disk_read.Take(staged);
    block = staged.data();
  }
  const std::span<const std::byte> bytes(block, lease.extent.length);
  if (st.ok() && check) st = check(bytes);
  if (st.ok() && skip_bytes > bytes.size()) st = Corruption("stored block is too short");
  const size_t payload_bytes = st.ok() ? bytes.size() - skip_bytes : 0;
  if (st.ok() && ctx.leased != nullptr && lease.address != nullptr &&
      payload_bytes >= kLeasedPayloadMinBytes) {
    ctx.reply.AppendBulkHeader(payload_bytes);
    std::string& out = *ctx.reply.buffer();
    ctx.leased->payloads.push_back(
        LeasedPayload{out.size(), lease.id, block + skip_bytes, payload_bytes});
    ctx.leased->bytes += payload_bytes;
    out.append(resp::kCrlf);
    return Status::Ok();  // the connection ends the lease once the bytes are sent
  }
  const size_t reply_mark = ctx.reply.buffer()->size();
  if (st.ok()) {
    ctx.reply.AppendBulk(std::string_view(reinterpret_cast<const char*>(block) + skip_bytes,
                                          bytes.size() - skip_bytes));
  }
  Status released = store.Release(lease.id);
  if (!released.ok()) {
    // The lease lapsed under the read: whatever was read, or found wrong, may be another block's
    // bytes. A miss, not a corrupt block.
    ctx.reply.buffer()->resize(reply_mark);
    st = released;
  }
  return st;
}

}  // namespace kvtier::server
