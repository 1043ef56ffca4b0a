// KVT.GPUATTACH: shares the daemon's GPU pool with a client on the node, as KVT.ATTACH shares the
// host arena. The reply says how to map the pool: a CUDA IPC handle (the real pool) or, for the
// fake pool of CPU-only machines, a memfd passed with SCM_RIGHTS. From then on the connection's
// KVT.ACQUIRE leases GPU blocks too (commands_kvt_shm.cc), and the client copies them out of its
// mapping device-to-device. KVT.GPUDETACH undoes that for a client whose mapping failed, so its
// reads stop counting as pool reads and it is no longer leased blocks it cannot read.
#include <string>

#include "daemon/server/commands.h"
#include "daemon/server/kvt_args.h"
#include "daemon/server/wire.h"
#include "daemon/store/store.h"

namespace kvtier::server {
namespace {

using resp::Command;

// The `kind` words of docs/protocol.md.
std::string_view KindName(tiers::PoolExportKind kind) {
  switch (kind) {
    case tiers::PoolExportKind::kCudaIpc:
      return "cuda-ipc";
    case tiers::PoolExportKind::kMemfd:
      return "memfd";
  }
  return "unknown";
}

Progress GpuAttach(CommandContext& ctx, Command&) {
  if (RefuseOffTheUnixSocket(ctx, "KVT.GPUATTACH")) return Progress::kDone;
  if (!ctx.server.gpu_pool_shared) {
    // The note says why ("no GPU tier: built without CUDA ..."), as INFO does.
    const std::string& note = ctx.server.options.gpu_tier_note;
    ctx.reply.AppendError(
        "NOTFOUND KVT.GPUATTACH: " +
        (note.empty() ? std::string("this daemon does not share a GPU pool") : note));
    return Progress::kDone;
  }
  if (ctx.server.draining_gpu_importers.load()) {
    ctx.reply.AppendError("SHUTDOWN KVT.GPUATTACH: kvtierd is stopping");
    return Progress::kDone;
  }
  Result<tiers::PoolExport> exported = ctx.server.store.ExportForClients(TierId::kGpu);
  if (!exported.ok()) {
    AppendStatusError(ctx.reply, Status(exported.status().code(),
                                        "KVT.GPUATTACH: " + exported.status().message()));
    return Progress::kDone;
  }
  if (exported->kind == tiers::PoolExportKind::kMemfd) ctx.send_fd = exported->fd;
  ctx.session.AttachGpuPool(ctx.server.gpu_importers);
  ctx.reply.AppendMapHeader(4);
  ctx.reply.AppendBulk("kind");
  ctx.reply.AppendBulk(KindName(exported->kind));
  ctx.reply.AppendBulk("pool_bytes");
  ctx.reply.AppendInteger(static_cast<int64_t>(exported->pool_bytes));
  ctx.reply.AppendBulk("device");
  ctx.reply.AppendInteger(exported->device);
  ctx.reply.AppendBulk("handle");
  ctx.reply.AppendBulk(exported->ipc_handle);
  return Progress::kDone;
}

// Leases already granted stay valid until released; only later KVT.ACQUIREs change. A client
// sends it once its import is closed, so that shutdown need not wait for it.
Progress GpuDetach(CommandContext& ctx, Command&) {
  ctx.session.DetachGpuPool();
  ctx.reply.AppendSimpleString("OK");
  return Progress::kDone;
}

constexpr CommandSpec kCommands[] = {
    {"KVT.GPUATTACH", 1, false, GpuAttach},
    {"KVT.GPUDETACH", 1, false, GpuDetach, true},
};

}  // namespace

std::span<const CommandSpec> KvtGpuCommands() { return kCommands; }

}  // namespace kvtier::server
