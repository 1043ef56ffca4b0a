// ReplyWriter: encodes replies into a connection's output buffer, in RESP2 or RESP3.
//
// The server builds every reply through one writer per connection, so the choice of dialect
// (switched by HELLO 2 / HELLO 3) is made here once instead of at every call site: a map is `%` in
// RESP3 and a flat array of keys and values in RESP2, a null is `_` or `$-1`, a double is `,` or a
// bulk string, a boolean `#` or an integer, and so on, the way Redis downgrades for RESP2 clients.
//
// The writer borrows the output string (the connection owns it) and only appends to it. A big
// payload need not be copied into the buffer: AppendBulkHeader() writes just `$<len>\r\n`, and the
// caller sends the payload and the trailing CRLF itself (e.g. with scatter/gather I/O). Aggregates
// are written as a header followed by exactly that many elements; the writer does not check the
// count. Not thread-safe; one writer belongs to one connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/resp/protocol.h"
#include "common/status.h"

namespace kvtier::resp {

class ReplyWriter {
 public:
  // `out` must outlive the writer. Replies are appended; the writer never clears it.
  explicit ReplyWriter(std::string* out, Protocol protocol = Protocol::kResp2)
      : out_(out), protocol_(protocol) {}

  Protocol protocol() const { return protocol_; }
  void set_protocol(Protocol protocol) { protocol_ = protocol; }
  std::string* buffer() const { return out_; }

  // `+OK`. CR and LF in `text` would break framing and are replaced by spaces.
  void AppendSimpleString(std::string_view text);
  // `-ERR unknown command`: `message` starts with the error code ("ERR", "NOTFOUND", "BUSY", ...),
  // as Redis clients expect. CR and LF are replaced by spaces.
  void AppendError(std::string_view message);
  // `-<WORD> <message>` with the protocol's word for `status` (resp::StatusWord). Precondition:
  // !status.ok().
  void AppendError(const Status& status);
  void AppendInteger(int64_t value);
  // `$<len>\r\n<bytes>\r\n`: binary safe.
  void AppendBulk(std::string_view bytes);
  // Only the `$<len>\r\n` of a bulk string; the caller appends or sends `len` bytes and then kCrlf.
  void AppendBulkHeader(size_t length);
  // The null reply of GET on a miss: `_` in RESP3, `$-1` (null bulk) in RESP2.
  void AppendNull();
  // A null where an array is expected: `_` in RESP3, `*-1` in RESP2.
  void AppendNullArray();
  // Headers of aggregates, followed by `count` elements (2 * `pairs` for a map, key then value).
  void AppendArrayHeader(size_t count);
  void AppendMapHeader(size_t pairs);   // RESP2: an array of 2 * pairs
  void AppendSetHeader(size_t count);   // RESP2: an array
  void AppendPushHeader(size_t count);  // out-of-band message; RESP2: an array
  // `,3.25` in RESP3 (`inf`, `-inf`, `nan` included), the same text as a bulk string in RESP2.
  // The shortest text that reads back as the same double.
  void AppendDouble(double value);
  // `#t` / `#f` in RESP3, `:1` / `:0` in RESP2.
  void AppendBoolean(bool value);
  // `(12345678901234567890` in RESP3, a bulk string in RESP2. `digits` must be a decimal integer.
  void AppendBigNumber(std::string_view digits);
  // Verbatim text such as INFO's: `=<len>\r\ntxt:<text>\r\n` in RESP3, a bulk string of `text` in
  // RESP2. `format` is three characters ("txt", "mkd"); anything else is written as "txt".
  void AppendVerbatim(std::string_view text, std::string_view format = "txt");

 private:
  void AppendLine(char type, std::string_view text);  // type, text with CR/LF blanked, CRLF
  void AppendLength(char type, size_t length);        // type, decimal length, CRLF

  std::string* out_;
  Protocol protocol_;
};

}  // namespace kvtier::resp
