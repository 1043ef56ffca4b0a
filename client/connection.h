// Connection: one socket to kvtierd, speaking RESP: send a batch of commands, read their replies.
//
// The Client owns exactly one Connection. Send() writes a whole RequestBuffer with gathered
// writes; ReadReply() returns the replies in order, one per command sent. Pipelining is the
// caller's: send a batch, then read that many replies. While a big batch is being written the
// connection also reads whatever replies already arrive, so a batch whose requests and replies are
// both large cannot deadlock against a daemon that stops reading until its replies drain.
//
// On a Unix socket every read uses recvmsg() and keeps any file descriptor the daemon attaches
// (SCM_RIGHTS, sent with the KVT.ATTACH reply); TakeReceivedFd() hands it over.
//
// `timeout` bounds every wait for the daemon to make progress (to accept bytes or to send some),
// not a whole call, so a multi-gigabyte transfer on a slow link does not time out while it moves.
// After an I/O error, a timeout or a malformed reply the stream position is unknown: the
// connection closes its socket and every later call returns the first error (its code, with the
// message prefixed "connection unusable after earlier error: "). Reconnect with a new Client.
//
// Not thread-safe: one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "client/endpoint.h"
#include "client/request_buffer.h"
#include "client/unique_fd.h"
#include "common/resp/reply.h"
#include "common/resp/reply_parser.h"
#include "common/status.h"

namespace kvtier::client {

class Connection {
 public:
  struct Options {
    std::chrono::milliseconds timeout{10'000};  // 0: wait forever
    resp::ReplyParser::Options parser;
  };

  // Connects to `endpoint` within `timeout` (resolving a TCP host name is not bounded by it: see
  // ConnectOptions::timeout). Errors name the URL: the translated errno of socket() or connect()
  // (kNotFound when the socket file does not exist, kDeviceError when refused: is kvtierd
  // running?), kNotFound when a TCP host does not resolve, kTimeout.
  static Result<std::unique_ptr<Connection>> Open(const Endpoint& endpoint, const Options& options);

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Writes every byte of `request`. Errors: the translated errno of the write, kTimeout; either
  // leaves the connection unusable. When the daemon answered the command being written with an
  // error and closed the connection before taking the rest of it (a bulk over its limit), that
  // error is returned instead of the write's: it names the cause. An error answering an earlier
  // command of the batch (a per-command NOTFOUND) says nothing about the failure and is not.
  Status Send(const RequestBuffer& request);

  // The next reply, in the order the commands were sent. An error reply (`-BUSY ...`) is a
  // successful read of a Reply of type kError. Out-of-band pushes are skipped. Errors: kDeviceError
  // when the daemon closed the connection or a read failed, kTimeout, kInternal for bytes that are
  // not RESP; each leaves the connection unusable.
  Result<resp::Reply> ReadReply();

  // The oldest descriptor received with SCM_RIGHTS and not yet taken; invalid when none.
  UniqueFd TakeReceivedFd();
  // Closes every descriptor received and not taken: before a command whose reply carries one,
  // so that a descriptor left by an earlier reply (a raw KVT.ATTACH sent through Command) cannot
  // be taken for this reply's.
  void DiscardReceivedFds() { received_fds_.clear(); }

  const Endpoint& endpoint() const { return endpoint_; }
  bool usable() const { return failure_.ok(); }
  // Gives the connection up as an I/O error would: for a reply that parsed but that the protocol
  // does not allow, after which what the daemon meant (and granted) is unknown. Returns `why`.
  Status Abandon(Status why) { return Fail(std::move(why)); }
  // Gives the connection up when an exception (std::bad_alloc) interrupted a round trip: what was
  // written and read of it is unknown, so a later call could take this call's replies for its
  // own. Never throws, since memory may be what ran out.
  void AbandonAfterException() noexcept;

 private:
  Connection(Endpoint endpoint, Options options, UniqueFd fd);

  // Waits until the socket is writable (returns true) or, meanwhile, readable (reads and returns
  // false). Errors: kTimeout, poll's errno.
  Result<bool> WaitWritableOrRead();
  // Writes `request`; *written counts the bytes the socket took, also when it fails.
  Status SendAll(const RequestBuffer& request, size_t* written);
  // Reads what the daemon sent before it closed its end (a write just failed with EPIPE).
  void ReadWhatWasSentBeforeClosing();
  // Waits until the socket is readable, then reads once.
  Status WaitAndRead();
  // One non-blocking recvmsg, fed to the parser; complete replies are queued. EAGAIN is OK.
  Status ReadAvailable();
  Status Feed(const char* data, size_t length);
  // Records the first failure, closes the socket, and returns the failure.
  Status Fail(Status status);
  Status FailureForLaterCall() const;
  int PollTimeoutMs() const;

  Endpoint endpoint_;
  Options options_;
  UniqueFd fd_;
  resp::ReplyParser parser_;
  std::deque<resp::Reply> replies_;
  std::vector<UniqueFd> received_fds_;
  std::vector<char> scratch_;
  Status failure_;
};

}  // namespace kvtier::client
