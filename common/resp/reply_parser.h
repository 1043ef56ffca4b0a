// ReplyParser: decodes the replies a server sends on one client connection.
//
// The client library feeds it bytes as they arrive, split anywhere, and takes one complete reply at
// a time as a Reply tree. Both dialects are accepted at any time (RESP3 is a superset of RESP2), so
// the parser needs no notice of HELLO. RESP3 attributes (`|`) are parsed and dropped, as hiredis
// does; pushes (`>`) are returned like any reply with type kPush, and the caller routes them.
// Streamed strings and aggregates (`$?`, `*?`) are not supported; Redis does not send them.
//
// The server is not trusted with memory: nothing is allocated from a declared length before the
// bytes arrive (a bulk reserves at most what is buffered, an aggregate at most a few slots), and
// headers beyond the limits in Options fail as soon as they are read. Any error is final; the
// connection should be dropped. One parser per connection; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/resp/reply.h"
#include "common/status.h"

namespace kvtier::resp {

class ReplyParser {
 public:
  struct Options {
    // Largest bulk string, blob error or verbatim string.
    size_t max_bulk_bytes = size_t{512} << 20;
    // Most elements of one aggregate; a map or attribute of N pairs counts 2N.
    size_t max_aggregate_len = size_t{1} << 20;
    // Longest simple string, error, integer, double or big number line, CRLF excluded.
    size_t max_line_bytes = size_t{64} << 10;
    // Deepest nesting of aggregates. Also bounds the recursion of Reply's destructor.
    size_t max_depth = 32;
    // Most wire bytes of one reply: an MGET of many 64 MiB blocks fits, a runaway stream does not.
    size_t max_reply_bytes = size_t{4} << 30;
    // A bulk payload's buffer is allocated at its declared length up to this many bytes when its
    // header arrives, instead of growing with the bytes received: no copy per doubling for large
    // values from a trusted peer. 0 (the default) allocates only what has arrived, so that a
    // peer cannot make the parser allocate what it never sends.
    size_t reserve_declared_up_to = 0;
  };

  ReplyParser() : ReplyParser(Options{}) {}
  explicit ReplyParser(Options options);

  // Consumes a prefix of `input`: up to and including the end of the next reply, or all of it when
  // no reply completes. Returns the bytes consumed; consumes nothing while a completed reply has
  // not been taken. Errors: kInvalidArgument ("Protocol error: ...") for bytes that are not RESP or
  // exceed a limit; final, later calls return it again. The caller should close the connection.
  Result<size_t> Feed(std::string_view input);

  // Reading a large value in place, for a caller that reads from a socket: while a bulk payload
  // is being received, bulk_bytes_left() says how many bytes of it are still expected (0 at any
  // other time). BeginInPlace(max) returns room for the next min(max, bulk_bytes_left()) of them
  // at their place in the value (the buffer grows to cover it), the caller reads into its front
  // and calls CommitInPlace(n) with the n bytes it wrote (at most the room's size: more is
  // ignored); then Feed goes on as before. The
  // payload is then copied once, by the kernel, instead of through the caller's buffer. The
  // room is allocated before the bytes arrive: `max` bounds it.
  size_t bulk_bytes_left() const { return state_ == State::kBulkBody ? bulk_left_ : 0; }
  std::span<char> BeginInPlace(size_t max);
  void CommitInPlace(size_t n);

  bool has_reply() const { return state_ == State::kReady; }
  // Precondition: has_reply().
  Reply TakeReply();

  // True between replies (no byte of the next one consumed).
  bool idle() const { return state_ == State::kType && stack_.empty() && reply_bytes_ == 0; }
  bool failed() const { return state_ == State::kFailed; }
  uint64_t consumed_bytes() const { return consumed_bytes_; }
  // Heap bytes held for the reply in progress (approximate: strings and element vectors). For tests
  // and the fuzzer, to check that memory follows the bytes received. Walks the partial tree.
  size_t buffered_capacity_bytes() const;

 private:
  enum class State : uint8_t {
    kType,      // expecting a type byte
    kLine,      // reading the line after the type byte
    kBulkBody,  // copying a bulk payload
    kBulkCrlf,  // expecting the CRLF after a payload
    kReady,     // a reply is complete, waiting for TakeReply()
    kFailed,    // an error was reported; final
  };

  // An aggregate being filled. An attribute's elements are parsed and thrown away.
  struct Frame {
    Reply node;
    size_t left = 0;
    bool attribute = false;
  };

  // Drops `n` bytes from the front of `input` and counts them, so that every limit is checked at
  // an exact stream position whatever the split.
  void Consume(std::string_view& input, size_t n);
  Status Step(std::string_view& input);
  Status StepType(std::string_view& input);
  Status StepLine(std::string_view& input);
  Status StepBulkBody(std::string_view& input);
  Status StepBulkCrlf(std::string_view& input);
  Status OnLine(size_t bytes_available);
  Status OnScalarLine();
  Status OnBulkHeader(size_t bytes_available);
  Status OnAggregateHeader();
  Status FinishBulk();
  // Places a finished value into its parent, closing every aggregate it completes.
  void Emit(Reply value);
  Status Fail(std::string message);

  Options options_;
  State state_ = State::kType;
  Status error_;
  char type_ = 0;     // type byte of the value being read
  std::string line_;  // its header line, CRLF excluded
  bool saw_cr_ = false;
  // The bulk value being received: its payload so far is bulk_.str's first
  // bulk_declared_ - bulk_left_ bytes (BeginInPlace may have sized the string past them).
  Reply bulk_;
  size_t bulk_left_ = 0;
  size_t bulk_declared_ = 0;
  size_t crlf_seen_ = 0;
  std::vector<Frame> stack_;  // open aggregates, outermost first
  Reply result_;              // the completed reply when kReady
  size_t reply_bytes_ = 0;    // wire bytes of the reply in progress
  uint64_t consumed_bytes_ = 0;
};

}  // namespace kvtier::resp
