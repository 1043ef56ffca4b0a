// The command table: every command of docs/protocol.md, how many arguments it takes, whether it
// may run before AUTH, and the handler that runs it against the store and writes its reply.
//
// Handlers are plain functions, one file per family (commands_connection.cc, commands_generic.cc,
// commands_kvt.cc, commands_kvt_shm.cc, commands_kvt_gpu.cc). They never block on the network:
// anything the connection must do besides sending the reply (close, pass a file descriptor, flush
// a long reply half-way) is asked for through CommandContext. Handlers run on the calling
// connection's strand; they may call the store, which is thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/resp/reply_writer.h"
#include "common/resp/request_parser.h"
#include "daemon/metrics/request_latency.h"
#include "daemon/server/server_context.h"
#include "daemon/server/session.h"
#include "daemon/store/store.h"

namespace kvtier::server {

// A large block the connection sends straight from its leased slot instead of copying it into the
// output buffer: the lease is held until the bytes are written (renewed while a slow reader takes
// them) and released before anything after them is sent. If the lease lapsed meanwhile the slot
// may have been reused, so the connection closes instead of finishing the reply: a client never
// receives a complete reply with wrong bytes. `at` is the offset in the output buffer where the
// payload goes (its bulk header is before it, its CRLF after it).
struct LeasedPayload {
  size_t at = 0;
  uint64_t lease_id = 0;
  const std::byte* data = nullptr;
  size_t bytes = 0;
};

// Payloads at least this large go out from their slot; smaller ones are copied (a copy costs less
// than the extra writes and the lease held meanwhile).
inline constexpr size_t kLeasedPayloadMinBytes = size_t{64} << 10;

struct LeasedOutput {
  std::vector<LeasedPayload> payloads;  // in output-buffer order
  size_t bytes = 0;                     // their total size, counted against the in-flight limit
};

// What a handler may ask of its connection, and the state of a reply written in pieces.
struct CommandContext {
  ServerContext& server;
  Session& session;
  resp::ReplyWriter& reply;
  // Close the connection once the reply is written (QUIT, protocol abuse).
  bool close_after_reply = false;
  // Pass this descriptor with SCM_RIGHTS on the first byte of this command's reply (KVT.ATTACH,
  // KVT.GPUATTACH of a fake pool).
  int send_fd = -1;
  // A handler whose reply can grow past the client's in-flight limit (MGET, KVT.GET) writes part of
  // it, records where it stopped here and returns kMore; the connection sends what is buffered and
  // calls it again with the same command. Both start at 0 for every command.
  size_t cursor = 0;
  bool stopped = false;
  // A SET whose value was received straight into a reserved slot (staged_value.h): the
  // reservation to publish under the key; the value's argument is empty. The handler takes it
  // (resets it) once it has committed or aborted it; the connection aborts what is left.
  std::optional<uint64_t> staged_value;
  // Puts this command committed whose copy to NVMe is pending (nvme.write_through), each with
  // where its acknowledgement is in the output buffer. The connection holds the reply until every
  // copy ended (up to limits.mover_wait_ms), and a put whose copy was not made is not
  // acknowledged as stored durably: its status word says why (BUSY, DEVICE, TIMEOUT), or the
  // command's reply becomes that error (Connection::AwaitWriteThroughs). Handlers that commit
  // record every id with NoteCommit: `word_at` is the offset of the put's own status word (a
  // simple string appended right after the call, as KVT.PUT and KVT.COMMIT answer per block), or
  // kWholeReply when the command's reply as a whole acknowledges it (SET, MSET).
  static constexpr size_t kWholeReply = SIZE_MAX;
  struct PendingAck {
    uint64_t reservation_id = 0;
    size_t word_at = kWholeReply;
  };
  std::vector<PendingAck> write_throughs;
  // Why a kWholeReply put's copy was not made (the first such), kept across the flushes of a
  // command answered in pieces until its reply is final.
  Status write_through_failure;
  void NoteCommit(uint64_t reservation_id, size_t word_at = kWholeReply) {
    if (server.store.WriteThroughTracked(reservation_id)) {
      write_throughs.push_back({reservation_id, word_at});
    }
  }
  // Where AppendLeasedBulk queues large payloads; nullptr makes it copy them into the reply.
  LeasedOutput* leased = nullptr;
  // For handlers that return kRetryLater: when they first did, and what they must remember
  // across calls (keys removed so far, the first error).
  std::chrono::steady_clock::time_point waiting_since{};
  int64_t tally = 0;
  Status first_error;
  // A resumable handler wrote its reply's header (an array of per-key answers) on an earlier
  // call; the per-key answers continue from `cursor`.
  bool started = false;
  std::chrono::steady_clock::time_point mover_waiting_since{};
  // A block being read from disk for this command's reply (AppendLeasedBulk): the command
  // answers kPending until it is done, and its lease is reused when the command is called again
  // (AcquireForReply).
  DiskRead disk_read;
  // A handler's own state across kRetryLater calls (KVT.LOOKUP waiting for the remote tier).
  std::shared_ptr<void> resume_state;
  // Set by WaitsForMover when it answers true: the connection's wait for this kRetryLater is cut
  // short by the mover's progress (MoverWaiters). Reset before every call of the handler.
  bool waits_for_mover_now = false;
  // What the command's latency is recorded under (metrics::RequestLatency): named by the
  // handlers of lookups, gets and puts with Time, which then report with Found each tier they
  // found or placed a block in. A command that names none is not timed, nor is any with the
  // histograms off.
  std::optional<metrics::RequestLabels> timed;

  void Time(metrics::RequestOp op, metrics::RequestPath path) {
    if (!timed && server.request_latency.enabled())
      timed = metrics::RequestLabels{op, path, std::nullopt};
  }
  void Found(TierId tier) {
    if (timed) timed->Found(tier);
  }
  // For reads: Acquire answered `read` kPending, the block comes up from below the host tier and
  // the wait is this command's latency, recorded as nvme. A block fetched from the remote tier
  // answers kPending too and is recorded as nvme as well: the status does not say which tier the
  // read waits for.
  void FoundPending(const Status& read) {
    if (read.code() == StatusCode::kPending) Found(TierId::kNvme);
  }

  // True when the buffered reply bytes (queued leased payloads included) reached the client's
  // in-flight limit.
  bool OutputFull() const {
    const size_t queued = reply.buffer()->size() + (leased != nullptr ? leased->bytes : 0);
    return queued >= server.options.max_inflight_bytes_per_client;
  }
  // For a handler that found a block it must change leased by a reader: true (start the wait)
  // until the server's reader_wait_ms has passed since the first call that waited.
  bool KeepWaitingForReaders();
  // For a handler whose store call answered `status`: true (return kRetryLater) when that is
  // kPending (the background mover is making room or reading a block up from NVMe) and the
  // server's mover_wait_ms has not passed since the first call that waited; false otherwise, and
  // the handler answers as it would (a kPending past the wait: BUSY, or a miss for a read).
  bool WaitsForMover(const Status& status);
  // Whether a handler of this command has waited for the mover yet.
  bool WaitedForMover() const {
    return mover_waiting_since != std::chrono::steady_clock::time_point{};
  }
};

// kDone: the reply is written. kMore: the reply outgrew the in-flight limit; flush and call again.
// kRetryLater: a block the command must change is being read, or the store's mover is making
// room or reading a block up; flush, wait a moment without blocking the thread, and call again
// with the same context.
enum class Progress : uint8_t { kDone, kMore, kRetryLater };

using CommandHandler = Progress (*)(CommandContext& ctx, resp::Command& cmd);

struct CommandSpec {
  std::string_view name;  // upper case, as dispatched: "GET", "KVT.LOOKUP"
  // Redis' convention: n > 0 exactly n arguments (the name included), n < 0 at least -n.
  int arity;
  bool before_auth;  // may run before AUTH (PING, HELLO, AUTH, QUIT)
  CommandHandler handler;
  // Still served to a connection that maps the GPU pool while shutdown waits for it to let go
  // (KVT.GPUDETACH, QUIT, and KVT.RELEASE of leases a copy just finished with); its other commands
  // answer -SHUTDOWN.
  bool lets_go_of_gpu_pool = false;
};

// The families' tables, joined by FindCommand.
std::span<const CommandSpec> ConnectionCommands();
std::span<const CommandSpec> GenericCommands();
std::span<const CommandSpec> KeyspaceCommands();
std::span<const CommandSpec> KvtCommands();
std::span<const CommandSpec> KvtShmCommands();
std::span<const CommandSpec> KvtGpuCommands();

// Looks the command up and checks authentication and arity. Returns the spec to run, or nullptr
// when the command must not run; then the error reply has been written (unknown command, wrong
// number of arguments, NOAUTH), or, for an HTTP request sent to the port, close_after_reply is set
// and nothing is written, as Redis does.
const CommandSpec* PrepareCommand(CommandContext& ctx, const resp::Command& cmd);

// Appends bytes [skip_bytes, end) of a leased block to the reply as a bulk string and ends the
// lease. `check`, when given, vets the whole block first. A large payload of a memory tier, with
// ctx.leased set, is queued instead of copied (LeasedPayload): the connection sends it from the
// slot and ends the lease then. Otherwise the bytes are copied now; if the lease lapsed during the
// copy the slot may have been reused: the bytes are taken back out of the reply and the lease's
// error is returned, so the caller reports a miss (docs/protocol.md asks the same of every
// client). On any error nothing is left in the reply and the lease has ended.
//
// A block on a tier without an address (NVMe, read in place) is read on a disk-read thread
// (DiskReads): the first call starts the read, keeps the lease in ctx.disk_read and answers
// kPending, appending nothing (the handler waits for it as for the mover: WaitsForMover), and a
// later call with the same lease (AcquireForReply) appends the bytes.
Status AppendLeasedBulk(CommandContext& ctx, const store::Lease& lease, size_t skip_bytes,
                        const std::function<Status(std::span<const std::byte>)>& check = {});

// The lease of `key`'s block for a reply: the one ctx.disk_read holds for it (the command is
// being called again once the read has ended), else Store::Acquire's.
Result<store::Lease> AcquireForReply(CommandContext& ctx, const NamespaceId& ns,
                                     const BlockKey& key, store::Store::Reader reader);

}  // namespace kvtier::server
