// Reply: one decoded RESP2 or RESP3 reply, as a small tree of values, for the client side.
//
// A Reply is a plain value that owns its bytes: the reply parser builds it, the client library
// hands it to its caller, who may move strings (a 64 MiB block payload) out of it. The two
// dialects decode into the same types, so a RESP2 null bulk (`$-1`), a null array (`*-1`) and a
// RESP3 `_` are all kNull, and code above the client does not care which dialect was negotiated.
// RESP2 cannot tell a map from an array; a RESP2 map arrives as an array of keys and values.
// Copyable and movable; no synchronisation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::resp {

enum class ReplyType : uint8_t {
  kSimpleString,  // `+`
  kError,         // `-` and RESP3's blob error `!`
  kInteger,       // `:`
  kBulkString,    // `$`
  kNull,          // `_`, `$-1`, `*-1`
  kArray,         // `*`
  kMap,           // `%` (RESP3)
  kSet,           // `~` (RESP3)
  kPush,          // `>` (RESP3): an out-of-band message, not the answer to a command
  kDouble,        // `,` (RESP3)
  kBoolean,       // `#` (RESP3)
  kBigNumber,     // `(` (RESP3)
  kVerbatim,      // `=` (RESP3)
};

// "simple-string", "error", "integer", ... for messages and test output.
std::string_view ReplyTypeName(ReplyType type);

struct Reply {
  ReplyType type = ReplyType::kNull;
  // kInteger: the value; kBoolean: 1 or 0.
  int64_t integer = 0;
  // kDouble: the value.
  double number = 0;
  // kSimpleString, kBulkString: the bytes; kError: "<CODE> <message>"; kBigNumber: the digits;
  // kDouble: the text as sent; kVerbatim: the text without its format prefix.
  std::string str;
  // kVerbatim: the three-character format ("txt", "mkd").
  std::string format;
  // kArray, kSet, kPush: the elements; kMap: key, value, key, value, ...
  std::vector<Reply> elements;

  bool is_error() const { return type == ReplyType::kError; }
  bool is_null() const { return type == ReplyType::kNull; }
  // A compact rendering for tests and logs: `"OK"`, `(error) ERR x`, `42`, `nil`, `[1, "a"]`,
  // `{"k": 1}`, `~["a"]`, `>["message"]`, `3.5`, `true`, `(big) 123`, `txt:"hello"`.
  std::string DebugString() const;
  // The same, cut after about `max_bytes` (then ending in "..."), without rendering the rest: for
  // error messages about replies that may be large.
  std::string DebugString(size_t max_bytes) const;

  bool operator==(const Reply& other) const = default;

  // Builders for tests and for code that answers locally.
  static Reply Simple(std::string text);
  static Reply Error(std::string text);
  static Reply Integer(int64_t value);
  static Reply Bulk(std::string bytes);
  static Reply Null();
  static Reply Aggregate(ReplyType type, std::vector<Reply> elements);
};

}  // namespace kvtier::resp
