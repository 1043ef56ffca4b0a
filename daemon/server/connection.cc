#include "daemon/server/connection.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <utility>

#include "common/fd_passing.h"
#include "daemon/server/listeners.h"
#include "daemon/server/wire.h"

namespace kvtier::server {
namespace {

namespace asio = boost::asio;
using asio::redirect_error;
using asio::use_awaitable;
using boost::system::error_code;

// One read of ordinary requests. Redis reads 16 KiB at a time too: enough for a deep pipeline of
// small commands, small enough to be taken and given back per read.
constexpr size_t kReadBufferBytes = 16 << 10;
// A bulk payload with at least this much still to come is received straight into its argument.
constexpr size_t kDirectReadMinBytes = 4 << 10;
// The most one direct read asks for (it also never asks for more than has arrived).
constexpr size_t kDirectReadMaxBytes = 16 << 20;
// An output buffer (or the parser's line buffer) that grew past this is given back once it is
// empty instead of kept, so an idle connection costs a few KiB whatever it did before (the
// target is 64 KiB at most). 16 KiB keeps the buffer of a typical pipelined batch.
constexpr size_t kKeepOutputBytes = 16 << 10;
// A leased payload goes out in pieces of this size, its lease renewed before each, so a client
// that reads slowly but steadily never sees the lease lapse under it.
constexpr size_t kPayloadPieceBytes = 4 << 20;
// How many reads in a row may skip the readiness wait (see Receive).
constexpr int kMaxReadsWithoutWait = 8;
// How long a command that waits for readers (Progress::kRetryLater) pauses between attempts: at
// first kRetryPause, then an eighth of the time it has waited, up to kLongestRetryPause. A reader
// that is done soon costs the command a millisecond; one that takes seconds costs it about 60
// attempts in the first second and 31 a second after that (about 190 over reader_wait_ms's
// default 5 s) instead of a thousand a second (GETDEL, GETEX and SET ... GET copy the value at
// each).
constexpr std::chrono::milliseconds kRetryPause{1};
constexpr std::chrono::milliseconds kLongestRetryPause{32};

std::chrono::milliseconds ReaderRetryPause(const CommandContext& ctx) {
  if (ctx.waiting_since == std::chrono::steady_clock::time_point{}) return kRetryPause;
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - ctx.waiting_since);
  return std::clamp(waited / 8, kRetryPause, kLongestRetryPause);
}
// The same for a command that waits for the tier mover: the mover's progress wakes it sooner
// (MoverWaiters); this bounds the wait if that signal never comes.
constexpr std::chrono::milliseconds kMoverRetryPause{20};

}  // namespace

Connection::Connection(Socket socket, Transport transport, uint64_t id, ServerContext& server,
                       std::function<void()> on_exit)
    : server_(server),
      strand_(asio::make_strand(socket.get_executor())),
      socket_(std::move(socket)),
      timer_(strand_),
      send_guard_(strand_),
      session_(server.store, id, transport, server.options.password.empty()),
      parser_(ParserLimits(session_.authenticated())),
      full_limits_(session_.authenticated()),
      writer_(&out_),
      on_exit_(std::move(on_exit)) {
  if (transport == Transport::kUnix) {
    const std::optional<uid_t> uid = PeerUid(socket_.native_handle());
    if (uid && (*uid == 0 || *uid == geteuid())) session_.set_admin();
  }
}

Connection::~Connection() = default;

resp::RequestParser::Options Connection::ParserLimits(bool authenticated) const {
  resp::RequestParser::Options o;
  if (authenticated) {
    o.max_bulk_bytes = server_.options.max_bulk_bytes;
    o.max_array_len = server_.options.max_array_len;
    o.max_inline_bytes = server_.options.max_inline_bytes;
    o.max_command_bytes = server_.options.max_command_bytes;
  } else {
    o.max_bulk_bytes = kPreAuthBulkBytes;
    o.max_array_len = kPreAuthArgs;
    o.max_inline_bytes = kPreAuthBulkBytes;
    // Every argument at its largest, plus the headers ("$4096\r\n" and the CRLF after each).
    o.max_command_bytes = kPreAuthArgs * (kPreAuthBulkBytes + 16) + 16;
  }
  return o;
}

void Connection::Start() {
  error_code ec;
  // Reads are done by hand after a readiness wait; a non-blocking socket makes a spurious wake-up
  // return would_block instead of stalling an I/O thread.
  socket_.non_blocking(true, ec);
  Touch();
  // An exception (bad_alloc) ends the coroutine; Finish() has run by then, so there is nothing
  // left to report.
  auto ignore = [](std::exception_ptr) {};
  asio::co_spawn(strand_, Run(shared_from_this()), ignore);
  if (server_.options.idle_timeout_ms > 0) {
    asio::co_spawn(strand_, Watchdog(shared_from_this()), ignore);
  }
}

void Connection::Close() {
  asio::post(strand_, [self = shared_from_this()] { self->CloseSocket(); });
}

void Connection::CloseSocket() {
  closing_ = true;
  error_code ec;
  socket_.close(ec);
  timer_.cancel();
  send_guard_.cancel();
}

void Connection::ArmSendGuard() {
  const uint64_t serial = ++send_guard_serial_;
  send_guard_.expires_after(std::chrono::milliseconds(server_.options.payload_send_timeout_ms));
  send_guard_.async_wait([self = shared_from_this(), serial](error_code ec) {
    // A handler that was already queued when the write ended finds another serial.
    if (ec || serial != self->send_guard_serial_) return;
    self->send_guard_fired_ = true;
    self->CloseSocket();  // the pending write ends with an error; no send runs after this
  });
}

bool Connection::DisarmSendGuard() {
  ++send_guard_serial_;
  send_guard_.cancel();
  return std::exchange(send_guard_fired_, false);
}

void Connection::Touch() {
  if (server_.options.idle_timeout_ms == 0) return;
  deadline_ = Clock::now() + std::chrono::milliseconds(server_.options.idle_timeout_ms);
}

void Connection::Finish() {
  if (finished_) return;
  finished_ = true;
  closing_ = true;
  timer_.cancel();
  send_guard_.cancel();
  error_code ec;
  socket_.shutdown(asio::socket_base::shutdown_send, ec);
  socket_.close(ec);
  DropLeasedPayloads();
  session_.EndAll();
  server_.counters.connected_clients.fetch_sub(1);
  on_exit_();
}

Connection::Awaitable<void> Connection::Run(std::shared_ptr<Connection> self) {
  struct FinishOnExit {
    Connection* c;
    ~FinishOnExit() { c->Finish(); }
  } finish{this};
  while (!closing_) {
    const bool received = co_await Receive();
    if (!received) break;
    const bool processed = co_await Process();
    if (!processed) break;
    const bool flushed = co_await Flush();
    if (!flushed) break;
  }
}

Connection::Awaitable<void> Connection::Watchdog(std::shared_ptr<Connection> self) {
  while (!closing_) {
    timer_.expires_at(deadline_);
    error_code ec;
    co_await timer_.async_wait(redirect_error(use_awaitable, ec));
    if (closing_) break;
    // The deadline may have moved while the timer ran; only a passed deadline closes.
    if (Clock::now() >= deadline_) CloseSocket();
  }
}

Connection::Awaitable<bool> Connection::Receive() {
  // Between commands the connection may stay idle for hours: it keeps no read buffer meanwhile,
  // and gives back what a large command left in the parser and the session.
  if (parser_.idle()) {
    read_buf_.reset();
    if (parser_.buffered_capacity_bytes() > kKeepOutputBytes) {
      parser_ = resp::RequestParser(ParserLimits(full_limits_));
    }
    session_.ShrinkIfEmpty();
  }
  error_code ec;
  // Inside a command, bytes that have already arrived are read without a readiness wait: a large
  // value comes in bursts, and a wait per burst is a trip through the poller. A few such reads in
  // a row at most, so one client streaming a long value never keeps its I/O thread from the
  // others.
  size_t arrived = 0;
  if (!parser_.idle() && reads_without_wait_ < kMaxReadsWithoutWait) {
    arrived = socket_.available(ec);
  }
  if (arrived > 0) {
    ++reads_without_wait_;
  } else {
    reads_without_wait_ = 0;
    co_await socket_.async_wait(asio::socket_base::wait_read, redirect_error(use_awaitable, ec));
    if (ec) co_return false;
    arrived = socket_.available(ec);
  }
  // available() is 0 at end of stream; reading one byte then reports the EOF.
  ec.clear();
  ReadAvailable(std::max<size_t>(arrived, 1), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) co_return true;
  co_return !ec;  // end of stream: a command cut short dies with the connection
}

size_t Connection::ReadAvailable(size_t arrived, error_code& ec) {
  const size_t pending = parser_.pending_bulk_bytes();
  if (pending > 0) staged_.MaybeBegin(server_, session_, parser_, arrived);
  if (!staged_.Renew(server_.store)) {
    // The value's reservation timed out (no byte came for reservation_timeout): its slot may be
    // given to another block soon, so nothing more is written there, and the SET could not be
    // published anyway.
    ec = asio::error::timed_out;
    return 0;
  }
  if (!read_buf_) read_buf_ = std::make_unique<char[]>(kReadBufferBytes);
  if (pending >= kDirectReadMinBytes) {
    std::span<char> window = parser_.BulkWindow(std::min({pending, arrived, kDirectReadMaxBytes}));
    // What arrived beyond the payload (its CRLF, the next commands) comes in the same read, into
    // the read buffer, instead of costing a read and a readiness wait of its own.
    const size_t beyond = window.size() == pending && arrived > pending ? kReadBufferBytes : 0;
    const std::array<asio::mutable_buffer, 2> targets = {asio::buffer(window.data(), window.size()),
                                                         asio::buffer(read_buf_.get(), beyond)};
    const size_t n = socket_.read_some(targets, ec);
    const size_t into_window = std::min(n, window.size());
    parser_.CommitBulk(into_window);
    input_ = std::string_view(read_buf_.get(), n - into_window);
    return n;
  }
  const size_t n = socket_.read_some(asio::buffer(read_buf_.get(), kReadBufferBytes), ec);
  input_ = std::string_view(read_buf_.get(), n);
  return n;
}

Connection::Awaitable<bool> Connection::Process() {
  for (;;) {
    Result<size_t> fed = parser_.Feed(input_);
    if (!fed.ok()) {
      co_await FailProtocol(fed.status());
      co_return false;
    }
    input_.remove_prefix(*fed);
    if (!parser_.has_command()) co_return true;
    resp::Command cmd = parser_.TakeCommand();
    staged_.Reset();
    const bool carry_on = co_await Execute(cmd);
    if (!carry_on) co_return false;
  }
}

Connection::Awaitable<bool> Connection::Execute(resp::Command& cmd) {
  CommandContext ctx{server_, session_, writer_};
  ctx.leased = &leased_;
  if (cmd.diverted_arg >= 0) ctx.staged_value = staged_.Take();
  const size_t reply_start = out_.size();
  // Read only with the histograms on: metrics.histograms false costs no clock read.
  const auto started = server_.request_latency.enabled() ? std::chrono::steady_clock::now()
                                                         : std::chrono::steady_clock::time_point{};
  const CommandSpec* spec = PrepareCommand(ctx, cmd);
  const bool ran = co_await RunHandler(spec, ctx, cmd);
  if (ran && ctx.timed) {
    server_.request_latency.Record(*ctx.timed, std::chrono::steady_clock::now() - started);
  }
  if (ctx.staged_value) AbortStagedValue(server_, session_, *ctx.staged_value);
  server_.counters.commands_processed.fetch_add(1, std::memory_order_relaxed);
  Touch();
  if (!ran) co_return false;
  if (ctx.send_fd >= 0) {
    const bool sent = co_await FlushWithFd(reply_start, ctx.send_fd);
    if (!sent) co_return false;
  }
  if (!full_limits_ && session_.authenticated()) {
    // The parser is between commands (the rest of the input is still in input_), so it can be
    // replaced by one with the full limits.
    parser_ = resp::RequestParser(ParserLimits(true));
    full_limits_ = true;
  }
  if (ctx.close_after_reply) {
    co_await Flush();
    co_return false;
  }
  if (out_.size() + leased_.bytes < server_.options.max_inflight_bytes_per_client) co_return true;
  const bool flushed = co_await Flush();
  co_return flushed;
}

Connection::Awaitable<bool> Connection::RunHandler(const CommandSpec* spec, CommandContext& ctx,
                                                   resp::Command& cmd) {
  for (;;) {
    if (spec == nullptr) co_return true;
    // Read before the store is asked: a move that ends after this wakes the wait below.
    const uint64_t mover_generation = server_.mover_waiters->Generation();
    ctx.waits_for_mover_now = false;
    const size_t call_start = out_.size();
    const Progress progress = spec->handler(ctx, cmd);
    if (progress == Progress::kDone) {
      // Nearly every command committed nothing to wait for: no coroutine, no clock read.
      if (ctx.write_throughs.empty() && ctx.write_through_failure.ok()) co_return true;
      const bool open = co_await AwaitWriteThroughs(ctx);
      // The last call wrote the reply that acknowledges the command's puts as a whole.
      if (open && !ctx.write_through_failure.ok()) {
        ReplaceReplyWithError(ctx, call_start, ctx.write_through_failure);
      }
      co_return open;
    }
    // The acknowledgements in the buffer are settled before it goes out.
    if (!ctx.write_throughs.empty()) {
      const bool open = co_await AwaitWriteThroughs(ctx);
      if (!open) co_return false;
    }
    // Flushing first also ends this connection's own leases: a pipelined GET of the value a SET
    // waits for must not make the SET wait for itself.
    const bool flushed = co_await Flush();
    if (!flushed) co_return false;
    if (progress == Progress::kRetryLater) {
      // (Not one co_await of a conditional between two calls: GCC 12 destroys the wrong
      // temporary there.)
      const bool for_mover = ctx.waits_for_mover_now;
      const bool open = co_await PauseBeforeRetry(
          for_mover ? kMoverRetryPause : ReaderRetryPause(ctx),
          for_mover ? std::optional<uint64_t>(mover_generation) : std::nullopt);
      if (!open) co_return false;
    }
  }
}

// The reply stays in the output buffer until the puts it acknowledges have their NVMe copies, so
// that an acknowledged put survives a crash; the thread serves other connections meanwhile. A put
// whose copy was not made (no room on NVMe, a device error, or still pending after
// limits.mover_wait_ms) is in memory only: its acknowledgement is changed to say so
// (SettleFailedAck). false: the connection is closing.
Connection::Awaitable<bool> Connection::AwaitWriteThroughs(CommandContext& ctx) {
  using PendingAck = CommandContext::PendingAck;
  store::Store& store = server_.store;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(server_.options.mover_wait_ms);
  std::vector<std::pair<PendingAck, Status>> failed;
  for (;;) {
    // Read before the store is asked: a copy that ends after this wakes the wait below.
    const uint64_t mover_generation = server_.mover_waiters->Generation();
    failed.clear();
    std::erase_if(ctx.write_throughs, [&](const PendingAck& ack) {
      std::optional<Status> outcome = store.TakeWriteThroughOutcome(ack.reservation_id);
      if (!outcome) return false;
      if (!outcome->ok()) failed.emplace_back(ack, *std::move(outcome));
      return true;
    });
    const bool late = !ctx.write_throughs.empty() && std::chrono::steady_clock::now() >= deadline;
    if (late) {
      const Status why = Timeout("its copy to NVMe was not made within limits.mover_wait_ms (" +
                                 std::to_string(server_.options.mover_wait_ms) + " ms)");
      for (const PendingAck& ack : ctx.write_throughs) {
        store.WriteThroughTimedOut(ack.reservation_id);
        failed.emplace_back(ack, why);
      }
      ctx.write_throughs.clear();
    }
    // Last word first: a changed word's length moves only the words after it.
    std::ranges::sort(failed, std::ranges::greater{},
                      [](const auto& f) { return f.first.word_at; });
    for (const auto& [ack, why] : failed) SettleFailedAck(ctx, ack, why);
    if (ctx.write_throughs.empty()) co_return true;
    // Replies before this one wait in the buffer with it (up to limits.mover_wait_ms), their
    // values' leases with them.
    RenewQueuedLeases(0);
    const bool open = co_await PauseBeforeRetry(kMoverRetryPause, mover_generation);
    if (!open) {
      for (const PendingAck& ack : ctx.write_throughs) store.ForgetWriteThrough(ack.reservation_id);
      co_return false;
    }
  }
}

void Connection::SettleFailedAck(CommandContext& ctx, const CommandContext::PendingAck& ack,
                                 const Status& why) {
  if (ack.word_at == CommandContext::kWholeReply) {
    if (ctx.write_through_failure.ok()) {
      ctx.write_through_failure =
          Status(why.code(), "stored in memory only (nvme.write_through): " + why.message());
    }
    return;
  }
  // Its word is in the buffer: the connection settles acknowledgements before it flushes.
  if (ack.word_at >= out_.size() || out_[ack.word_at] != '+') return;
  const std::string word = "+" + std::string(StatusWord(why.code())) + "\r\n";
  const size_t end = out_.find("\r\n", ack.word_at);  // the line of `+OK`
  const size_t length =
      end == std::string::npos ? out_.size() - ack.word_at : end + 2 - ack.word_at;
  ReplaceAt(ctx, ack.word_at, length, word);
}

void Connection::ReplaceReplyWithError(CommandContext& ctx, size_t at, const Status& status) {
  // A reply that is an error already says the command did not succeed; it stays.
  if (at < out_.size() && out_[at] == '-') return;
  std::string error;
  resp::ReplyWriter(&error, writer_.protocol()).AppendError(status);
  ReplaceAt(ctx, at, out_.size() - at, error);
}

void Connection::ReplaceAt(CommandContext& ctx, size_t at, size_t length,
                           std::string_view replacement) {
  out_.replace(at, length, replacement);
  // What is placed by offset after the change moves with it: payloads sent from their slots, and
  // the words of puts still waiting for their copies.
  const auto shift = static_cast<ptrdiff_t>(replacement.size()) - static_cast<ptrdiff_t>(length);
  const auto moved = [&](size_t offset) {
    return offset > at && offset != CommandContext::kWholeReply
               ? static_cast<size_t>(static_cast<ptrdiff_t>(offset) + shift)
               : offset;
  };
  for (LeasedPayload& p : leased_.payloads) p.at = moved(p.at);
  for (CommandContext::PendingAck& ack : ctx.write_throughs) ack.word_at = moved(ack.word_at);
}

Connection::Awaitable<bool> Connection::PauseBeforeRetry(std::chrono::milliseconds pause_for,
                                                         std::optional<uint64_t> mover_generation) {
  auto pause = std::make_shared<asio::steady_timer>(strand_, pause_for);
  if (!mover_generation || server_.mover_waiters->Register(*mover_generation, pause)) {
    error_code ec;  // operation_aborted: the mover moved something
    co_await pause->async_wait(redirect_error(use_awaitable, ec));
  }
  if (closing_) co_return false;
  Touch();  // the client is waiting for us, not idle
  co_return true;
}

Connection::Awaitable<bool> Connection::FailProtocol(const Status& status) {
  server_.counters.protocol_errors.fetch_add(1, std::memory_order_relaxed);
  writer_.AppendError("ERR " + status.message());
  co_await Flush();
  co_return false;
}

Connection::Awaitable<bool> Connection::Flush() {
  if (out_.empty()) co_return true;
  const bool sent = co_await WriteOut(out_.size());
  out_.clear();
  if (out_.capacity() > kKeepOutputBytes) std::string().swap(out_);
  co_return sent;
}

Connection::Awaitable<bool> Connection::WriteOut(size_t end) {
  bool ok = true;
  size_t from = 0;
  size_t done = 0;
  error_code ec;
  for (; done < leased_.payloads.size() && leased_.payloads[done].at <= end; ++done) {
    const LeasedPayload& payload = leased_.payloads[done];
    size_t trailer_sent = 0;
    if (ok) {
      const std::string_view preceding(out_.data() + from, payload.at - from);
      const bool last = done + 1 == leased_.payloads.size() || leased_.payloads[done + 1].at > end;
      const size_t trailer_end = last ? end : leased_.payloads[done + 1].at;
      const std::string_view trailer(out_.data() + payload.at, trailer_end - payload.at);
      const bool sent = co_await WritePayload(preceding, done, trailer, &trailer_sent);
      ok = sent;
    }
    // Every payload's lease ends here, sent or not. One that lapsed meanwhile may have had its
    // slot reused under the write: the reply must not be completed.
    if (!server_.store.Release(payload.lease_id).ok() && ok) {
      server_.counters.lapsed_reply_leases.fetch_add(1, std::memory_order_relaxed);
      ok = false;
    }
    from = payload.at + trailer_sent;
  }
  for (size_t i = 0; i < done; ++i) leased_.bytes -= leased_.payloads[i].bytes;
  leased_.payloads.erase(leased_.payloads.begin(), leased_.payloads.begin() + done);
  if (ok) {
    co_await asio::async_write(socket_, asio::buffer(out_.data() + from, end - from),
                               redirect_error(use_awaitable, ec));
    ok = !ec;
  }
  if (ok) Touch();
  co_return ok;
}

Connection::Awaitable<bool> Connection::WritePayload(std::string_view preceding, size_t index,
                                                     std::string_view trailer,
                                                     size_t* trailer_sent) {
  error_code ec;
  *trailer_sent = 0;
  const LeasedPayload& payload = leased_.payloads[index];
  for (size_t at = 0; at < payload.bytes; at += kPayloadPieceBytes) {
    if (!server_.store.Renew(payload.lease_id).ok()) {
      server_.counters.lapsed_reply_leases.fetch_add(1, std::memory_order_relaxed);
      co_return false;
    }
    RenewQueuedLeases(index + 1);
    const size_t n = std::min(kPayloadPieceBytes, payload.bytes - at);
    const bool last_piece = at + n == payload.bytes;
    // The bytes before the payload (its bulk header, earlier replies) go in the same gather write
    // as its first piece: a separate small send costs the reader a wake-up of its own.
    std::array<asio::const_buffer, 3> pieces = {
        asio::buffer(preceding.data(), at == 0 ? preceding.size() : 0),
        asio::buffer(payload.data + at, n), asio::buffer(trailer.data(), 0)};
    const size_t head_bytes = pieces[0].size() + n;
    size_t sent = 0;
    if (last_piece) {
      // The reply's CRLF and what follows it may complete the reply only once no byte of the
      // payload can still be read from a slot whose lease lapsed. One send on the non-blocking
      // socket, right after the renewal, either takes every payload byte now (it does not wait
      // for the peer, so it ends long before the lease could lapse) or not: then the payload's
      // rest goes as before and the trailer only after the lease is released (WriteOut).
      pieces[2] = asio::buffer(trailer.data(), trailer.size());
      sent = socket_.send(pieces, 0, ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) ec.clear();
      if (ec) co_return false;
      if (sent >= head_bytes) {
        *trailer_sent = sent - head_bytes;
        Touch();
        co_return true;
      }
    }
    const std::array<asio::const_buffer, 2> rest = {
        asio::buffer(pieces[0] + std::min(sent, pieces[0].size())),
        asio::buffer(pieces[1] + (sent - std::min(sent, pieces[0].size())))};
    // The write waits for the client. The lease was renewed just now; if the client has not
    // taken the piece before half the lease's time, the connection closes, so that no send
    // reads the slot after the lease lapses and another block may have been written there.
    ArmSendGuard();
    co_await asio::async_write(socket_, rest, redirect_error(use_awaitable, ec));
    if (DisarmSendGuard()) {
      server_.counters.stalled_reply_closes.fetch_add(1, std::memory_order_relaxed);
      co_return false;
    }
    if (ec) co_return false;
    Touch();
  }
  co_return true;
}

void Connection::RenewQueuedLeases(size_t first) {
  const auto now = std::chrono::steady_clock::now();
  if (now - queued_leases_renewed_at_ <
      std::chrono::milliseconds(server_.options.payload_send_timeout_ms / 2)) {
    return;
  }
  queued_leases_renewed_at_ = now;
  // One that lapsed already is found out when its turn comes (WritePayload, WriteOut's Release).
  for (size_t i = first; i < leased_.payloads.size(); ++i) {
    (void)server_.store.Renew(leased_.payloads[i].lease_id);
  }
}

void Connection::DropLeasedPayloads() {
  for (const LeasedPayload& payload : leased_.payloads) {
    (void)server_.store.Release(payload.lease_id);
  }
  leased_.payloads.clear();
  leased_.bytes = 0;
}

Connection::Awaitable<bool> Connection::FlushWithFd(size_t offset, int fd) {
  // Earlier replies go first, so the descriptor arrives with this reply's first byte.
  error_code ec;
  if (offset > 0) {
    const bool sent = co_await WriteOut(offset);
    if (!sent) co_return false;
  }
  const std::string_view reply = std::string_view(out_).substr(offset);
  size_t sent = 0;
  while (sent == 0) {
    Result<size_t> r = SendWithFd(socket_.native_handle(), reply, fd);
    if (r.ok()) {
      sent = *r;
    } else if (r.status().code() == StatusCode::kBusy) {
      co_await socket_.async_wait(asio::socket_base::wait_write, redirect_error(use_awaitable, ec));
      if (ec) co_return false;
    } else {
      co_return false;
    }
  }
  out_.erase(0, offset + sent);
  const bool flushed = co_await Flush();
  co_return flushed;
}

}  // namespace kvtier::server
