// The vocabulary shared by the RESP codec: protocol versions and the few lexical rules that the
// request parser, the reply parser and the reply writer must agree on.
//
// RESP (the Redis serialization protocol) frames every value with a one-byte type tag and CRLF-
// terminated header lines; RESP2 is what every Redis client speaks first, RESP3 (negotiated with
// HELLO 3) adds maps, sets, doubles, booleans, a dedicated null and out-of-band pushes. Everything
// here is a pure function of its arguments and may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier::resp {

// The wire dialect of one connection. A connection starts in RESP2 and switches on HELLO.
enum class Protocol : uint8_t { kResp2 = 2, kResp3 = 3 };

inline constexpr std::string_view kCrlf = "\r\n";

// The error both parsers report when the two bytes after a bulk payload are not CRLF.
inline constexpr std::string_view kPayloadWithoutCrlf =
    "Protocol error: bulk payload not followed by CRLF";

// Parses a decimal integer exactly as Redis does for lengths and integer replies: an optional '-',
// then digits with no leading zero (only "0" itself), no '+', no spaces, no overflow. "-0" is
// rejected too. nullopt when `text` is not such a number.
std::optional<int64_t> ParseInt64(std::string_view text);

// Grows the capacity of `payload`, a bulk payload `declared_bytes` long in the making, so that
// `extra` more bytes fit: geometrically, so that a payload arriving in small pieces is not copied
// quadratically, but never past the declared length, which the caller has already bounded.
void ReservePayload(std::string& payload, size_t extra, size_t declared_bytes);

// Reads the CRLF that ends a bulk payload, which may arrive split across reads. `crlf_seen` counts
// its bytes read so far (0 to 2) and advances. Returns how many bytes at the front of `input` it
// took. When it is still below 2 and `input` has bytes left after those, the next byte breaks the
// frame: the caller fails with kPayloadWithoutCrlf.
size_t ReadPayloadCrlf(std::string_view input, size_t& crlf_seen);

// ASCII case-insensitive equality; command names are ASCII, so no locale is consulted.
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// `text` with a-z mapped to A-Z (ToLowerAscii: A-Z to a-z) and every other byte unchanged.
std::string ToUpperAscii(std::string_view text);
std::string ToLowerAscii(std::string_view text);

// A byte as it appears in a protocol error message: the character itself when printable ASCII,
// otherwise "\xHH", so that an error never carries raw control bytes back to a terminal.
std::string DescribeByte(char byte);

}  // namespace kvtier::resp
