// RequestParser: turns the untrusted bytes of one client connection into commands.
//
// The daemon feeds it bytes as they arrive from the socket, split anywhere (one byte at a time is
// fine), and takes one complete command at a time: the arguments of a RESP array of bulk strings
// (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`, what every client library sends) or of an inline command
// (`PING\r\n`, what telnet and redis-cli's raw mode send). Each argument is its own std::string
// that the caller may move out, so a 64 MiB block payload is copied once, from the socket buffer
// into its argument, or not at all when the caller receives straight into BulkWindow().
//
// Nothing is allocated from a declared length: a `$1000000000` header reserves at most the bytes
// that have actually arrived, and the argument grows as more come. Headers that declare more than
// the limits in Options are rejected as soon as the header line is complete. Any error is final:
// the parser stays failed, and the connection should be answered with the error text and closed,
// because the position of the next frame in the stream is unknown.
//
// One parser per connection; not thread-safe (it is owned by the connection's strand).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvtier::resp {

// One command: its arguments in order, args[0] being the command name exactly as sent.
struct Command {
  std::vector<std::string> args;
  // The argument whose payload went to a caller's sink (RequestParser::DivertBulk) instead of
  // into args: that argument is empty here. -1: none.
  int diverted_arg = -1;

  size_t size() const { return args.size(); }
  // args[0], or empty for a command without arguments (the parser never yields one).
  std::string_view name() const;
  // ASCII case-insensitive test of the name: NameIs("get") matches "GET", "get" and "gEt".
  bool NameIs(std::string_view name) const;
  // The name in upper case, for dispatch tables keyed by "GET", "KVT.LOOKUP", ...
  std::string UpperName() const;
};

class RequestParser {
 public:
  struct Options {
    // Largest single argument. Redis' proto-max-bulk-len default; a KV block is at most 64 MiB.
    size_t max_bulk_bytes = size_t{512} << 20;
    // Most arguments in one command (`*N`); Redis' historical cap.
    size_t max_array_len = size_t{1} << 20;
    // Longest inline command line, CRLF excluded; Redis' PROTO_INLINE_MAX_SIZE. An inline line is
    // also held to max_command_bytes (without its CRLF).
    size_t max_inline_bytes = size_t{64} << 10;
    // Most wire bytes of one command, headers included; Redis' client-query-buffer-limit. Bounds
    // an MSET of many big values as a whole where max_bulk_bytes bounds each value.
    size_t max_command_bytes = size_t{1} << 30;
  };

  RequestParser() : RequestParser(Options{}) {}
  explicit RequestParser(Options options);

  // Consumes a prefix of `input`: everything up to and including the end of the next command, or
  // all of `input` when no command completes in it. Returns the number of bytes consumed; the
  // caller keeps the rest and feeds it again after TakeCommand(). Consumes nothing (returns 0)
  // while a completed command has not been taken. A command split across calls is carried over
  // in the parser, so the caller need not keep consumed bytes.
  //
  // Errors: kInvalidArgument with a Redis-style message ("Protocol error: invalid bulk length",
  // "Protocol error: invalid multibulk length", "Protocol error: expected '$', got 'x'",
  // "Protocol error: too big inline request", ...). The caller should reply `-ERR <message>` and
  // close the connection. consumed_bytes() tells (to within the offending line) where in the stream
  // the error was found. Every later call returns the same error.
  Result<size_t> Feed(std::string_view input);

  // True when a command is complete and waiting for TakeCommand().
  bool has_command() const { return state_ == State::kReady; }
  // Precondition: has_command(). Hands the command over and starts on the next one.
  Command TakeCommand();

  // True between commands: no byte of a next command has been consumed yet. A peer that closes the
  // connection while this is false has sent a truncated command.
  bool idle() const { return state_ == State::kStart; }
  bool failed() const { return state_ == State::kFailed; }
  // Total bytes consumed over the parser's life.
  uint64_t consumed_bytes() const { return consumed_bytes_; }
  // Heap bytes currently held for the command in progress (argument capacities, the argument
  // vector and the inline line). Tests and the fuzzer use it to check that memory follows the bytes
  // received, not the lengths declared.
  size_t buffered_capacity_bytes() const;

  // Receiving a big payload without a copy. While the parser is inside a bulk payload,
  // pending_bulk_bytes() is the number of payload bytes still expected (0 otherwise). BulkWindow()
  // grows the current argument by min(max_bytes, pending_bulk_bytes()) bytes and returns them; the
  // caller fills a prefix of the window (e.g. with recv) and calls CommitBulk(filled) before any
  // other call. The caller chooses max_bytes as the size of one read, so memory still follows the
  // bytes that arrive.
  size_t pending_bulk_bytes() const;
  std::span<char> BulkWindow(size_t max_bytes);
  // Precondition: `filled` <= the size of the last BulkWindow().
  void CommitBulk(size_t filled);

  // Receiving a big payload into memory the caller owns (a reserved arena slot). While
  // pending_bulk_bytes() > 0, the arguments so far (the last one being received) are
  // partial_args(), and the current payload's declared length is bulk_declared_bytes().
  // DivertBulk(sink), with sink.size() == bulk_declared_bytes(), copies the payload bytes received
  // so far to the front of sink and sends every later one there (BulkWindow then returns windows
  // of sink); the argument stays empty and the finished command's diverted_arg names it. The sink
  // must stay valid until the payload is complete or the parser is destroyed or failed. One
  // argument per command at most: returns false (and does nothing) when this command already has
  // a diverted argument, outside a payload, or when the sizes differ.
  const std::vector<std::string>& partial_args() const { return command_.args; }
  size_t bulk_declared_bytes() const { return state_ == State::kBulkBody ? bulk_declared_ : 0; }
  // Arguments of the current command whose header has not been read yet.
  size_t elements_left() const { return elements_left_; }
  bool DivertBulk(std::span<char> sink);
  // True while the current payload goes to a DivertBulk sink.
  bool bulk_diverted() const { return !sink_.empty(); }

 private:
  enum class State : uint8_t {
    kStart,        // before the first byte of a command
    kInline,       // inside an inline command line
    kArrayHeader,  // after '*', reading the element count line
    kBulkType,     // expecting the '$' of the next element
    kBulkHeader,   // after '$', reading the element's length line
    kBulkBody,     // copying an element's payload
    kBulkCrlf,     // expecting the CRLF after a payload
    kReady,        // a command is complete, waiting for TakeCommand()
    kFailed,       // an error was reported; final
  };

  // Each step consumes from the front of `input` and returns an error or OK.
  // Drops `n` bytes from the front of `input` and counts them. Every byte is counted when it is
  // consumed, so each limit check sees the exact position in the stream, whatever the split.
  void Consume(std::string_view& input, size_t n);
  Status Step(std::string_view& input);
  Status StepStart(std::string_view& input);
  Status StepBulkType(std::string_view& input);
  Status StepInline(std::string_view& input);
  Status StepHeaderLine(std::string_view& input);
  Status StepBulkBody(std::string_view& input);
  Status StepBulkCrlf(std::string_view& input);

  Status OnArrayHeader(std::string_view line);
  Status OnBulkHeader(std::string_view line, size_t bytes_available);
  Status FinishInline();
  void FinishElement();
  Status Fail(std::string message);
  // Grows the current argument's capacity for `extra` more bytes: geometrically (so a payload
  // arriving in small pieces is not copied quadratically) but never past its declared length.
  void ReserveBulk(size_t extra);

  Options options_;
  State state_ = State::kStart;
  Status error_;
  Command command_;
  // The line being read: an inline command (up to max_inline_bytes), or a length line without its
  // '*' or '$' (at most 20 characters, so a line that is not a number is refused early).
  std::string line_;
  bool saw_cr_ = false;       // the last byte of the line was '\r'
  size_t elements_left_ = 0;  // array elements whose header has not been read yet
  size_t bulk_left_ = 0;      // payload bytes of the current element still to come
  size_t bulk_declared_ = 0;  // declared length of the current element
  size_t crlf_seen_ = 0;      // bytes of the payload's CRLF already consumed (0..2)
  size_t command_bytes_ = 0;  // wire bytes of the current command so far
  size_t window_bytes_ = 0;   // size of the outstanding BulkWindow()
  std::span<char> sink_;      // where the current payload goes instead of its argument
  uint64_t consumed_bytes_ = 0;
};

}  // namespace kvtier::resp
