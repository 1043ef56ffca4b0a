// Connection: one client, served by one coroutine that reads requests, runs them and writes the
// replies, plus an optional watchdog coroutine for the idle timeout.
//
// The loop: wait until the socket is readable, read what has arrived, feed it to the RESP request
// parser, run every complete command (replies accumulate in one output buffer), then write the
// whole batch at once, so a pipelined client gets one write per read. Inside a command, bytes that
// have already arrived are read without the wait (a few times in a row at most). While a write is
// in flight nothing is read: a client that does not read its replies stops being read from, and
// the output buffer never holds more than about max_inflight_bytes_per_client (handlers with long
// replies flush half-way, see CommandContext). A malformed frame gets its error reply and the
// connection is closed, because the start of the next frame is unknown.
//
// Large values (GET, MGET, KVT.GET) are not copied into the output buffer: the reply holds their
// bulk headers, and Flush sends each payload straight from its leased arena slot between them
// (LeasedPayload in commands.h), then ends the lease. A command that must replace or remove a
// value another client is still receiving waits for that transfer on a timer (kRetryLater), never
// on the thread.
//
// Memory: an idle connection holds no read buffer (the buffer is taken when bytes arrive and given
// back once the parser is between commands) and an output buffer of at most kKeepOutputBytes, so it
// costs a few KiB. Large payloads are received straight into the parser's argument (BulkWindow),
// without passing through the read buffer, and a large SET value straight into the arena slot it
// will occupy (StagedValue).
//
// Ownership and threads: the server creates a connection with the accepted socket; the connection
// keeps itself alive (shared_ptr held by its coroutines) until the client is gone or Close() is
// called, then ends its session (aborting reservations, releasing leases) and calls `on_exit`.
// Everything runs on the connection's strand, so its state needs no lock; Close() may be called
// from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/resp/reply_writer.h"
#include "common/resp/request_parser.h"
#include "daemon/server/asio.h"
#include "daemon/server/commands.h"
#include "daemon/server/server_context.h"
#include "daemon/server/session.h"
#include "daemon/server/staged_value.h"

namespace kvtier::server {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;

  // `on_exit` runs once, on the connection's strand, after the session has ended.
  Connection(Socket socket, Transport transport, uint64_t id, ServerContext& server,
             std::function<void()> on_exit);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Starts serving. Call once, right after construction.
  void Start();
  // Closes the socket; the coroutines see it, end the session and exit. Any thread; idempotent.
  void Close();

 private:
  using Clock = std::chrono::steady_clock;
  template <typename T>
  using Awaitable = boost::asio::awaitable<T>;

  Awaitable<void> Run(std::shared_ptr<Connection> self);
  Awaitable<void> Watchdog(std::shared_ptr<Connection> self);
  // Waits for bytes and takes them (into read_buf_ or straight into a bulk argument). false: the
  // peer is gone or the socket was closed.
  Awaitable<bool> Receive();
  // Reads once, `arrived` being the bytes waiting in the socket (at least 1).
  size_t ReadAvailable(size_t arrived, boost::system::error_code& ec);
  // Feeds input_ to the parser and runs every complete command. false: close the connection.
  Awaitable<bool> Process();
  Awaitable<bool> Execute(resp::Command& cmd);
  // Runs the handler (none: PrepareCommand already answered), flushing between the pieces of a
  // long reply. false: the client is gone.
  Awaitable<bool> RunHandler(const CommandSpec* spec, CommandContext& ctx, resp::Command& cmd);
  // After a handler that committed puts with a write-through pending (CommandContext::
  // write_throughs): waits, without blocking the thread, until their NVMe copies ended, and
  // settles the acknowledgement of each copy that was not made.
  Awaitable<bool> AwaitWriteThroughs(CommandContext& ctx);
  // A put's copy was not made for `why`: its status word in the buffer becomes why's word, or
  // (kWholeReply) the command's reply is to become the error (ctx.write_through_failure).
  void SettleFailedAck(CommandContext& ctx, const CommandContext::PendingAck& ack,
                       const Status& why);
  // out_[at, end) becomes the error `status`, unless it is an error already.
  void ReplaceReplyWithError(CommandContext& ctx, size_t at, const Status& status);
  // out_[at, at + length) becomes `replacement`; leased payloads and pending words after it move
  // with it.
  void ReplaceAt(CommandContext& ctx, size_t at, size_t length, std::string_view replacement);
  // The pause of a command that tries again: `pause_for` (ReaderRetryPause for one that waits for
  // readers; kMoverRetryPause for one that waits for the mover: RunHandler's kRetryLater with
  // waits_for_mover_now, AwaitWriteThroughs), cut short with `mover_generation` by the mover's
  // progress since that generation (no pause at all when it moved something since). false: the
  // connection is closing.
  Awaitable<bool> PauseBeforeRetry(std::chrono::milliseconds pause_for,
                                   std::optional<uint64_t> mover_generation);
  Awaitable<bool> FailProtocol(const Status& status);
  // Writes the buffered replies. false: the write failed (the peer is gone) or a leased payload's
  // lease lapsed (the connection must close before the reply completes).
  Awaitable<bool> Flush();
  // Sends out_[0, end) with the leased payloads queued in that range in place, ending each
  // payload's lease before the bytes after it go out. The payloads are gone from leased_ after,
  // whatever the outcome; out_ is left as it is.
  Awaitable<bool> WriteOut(size_t end);
  // Sends `preceding` (output-buffer bytes before the payload) and payload leased_.payloads[index]
  // from its slot, in pieces, renewing the lease before each (and RenewQueuedLeases). `trailer`
  // (the output-buffer bytes after the payload, its CRLF first) rides with the last piece when one
  // non-blocking send takes that piece whole; *trailer_sent says how many of its bytes went.
  Awaitable<bool> WritePayload(std::string_view preceding, size_t index, std::string_view trailer,
                               size_t* trailer_sent);
  // Renews the leases of the payloads queued from leased_.payloads[first] on, at most every half
  // options.payload_send_timeout_ms: before each piece of the one being sent (first: the next
  // one), whose write ends within that timeout or closes the connection, so a queued lease is
  // renewed well inside its time however slowly the client takes the payloads ahead of it; and
  // while a reply waits for its write-through copies (AwaitWriteThroughs: all of them). Not at
  // every piece: that is quadratic in the payloads of a pipeline of many small ones.
  void RenewQueuedLeases(size_t first);
  // Ends the leases of every queued payload (the connection is closing).
  void DropLeasedPayloads();
  // Around a payload piece's write: closes the socket if the write has not ended within
  // options.payload_send_timeout_ms. Disarm says whether it did.
  void ArmSendGuard();
  bool DisarmSendGuard();
  // Writes out_[0, offset), then the rest with `fd` riding on its first byte.
  Awaitable<bool> FlushWithFd(size_t offset, int fd);

  // The parser limits before AUTH (small) and after (the configured ones).
  resp::RequestParser::Options ParserLimits(bool authenticated) const;
  // Pushes the idle deadline forward: a command completed or reply bytes were taken.
  void Touch();
  void CloseSocket();
  // Runs when Run ends, normally or by exception: closes, ends the session, reports the exit.
  void Finish();

  ServerContext& server_;
  boost::asio::strand<boost::asio::any_io_executor> strand_;
  Socket socket_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer send_guard_;  // ArmSendGuard
  uint64_t send_guard_serial_ = 0;
  bool send_guard_fired_ = false;
  std::chrono::steady_clock::time_point queued_leases_renewed_at_{};  // RenewQueuedLeases
  Session session_;
  resp::RequestParser parser_;
  StagedValue staged_;
  bool full_limits_;
  std::string out_;
  LeasedOutput leased_;
  resp::ReplyWriter writer_;
  std::unique_ptr<char[]> read_buf_;
  std::string_view input_;  // bytes of read_buf_ not yet fed to the parser
  int reads_without_wait_ = 0;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool closing_ = false;
  bool finished_ = false;
  std::function<void()> on_exit_;
};

}  // namespace kvtier::server
