// The status words of the wire protocol (docs/protocol.md): how a Status code is spelled as the
// first word of an error reply and as a per-key status string, and how a client reads one back.
// One table for the daemon and every client, so the two sides cannot drift apart.
//
// Pure functions; safe from any thread.
#pragma once

#include <string_view>

#include "common/status.h"

namespace kvtier::resp {

// OK, NOTFOUND, EXISTS, REJECTED, BUSY, DEVICE (device errors, checksum mismatches and corrupt
// metadata alike: the bytes could not be served), INVALID, TIMEOUT, SHUTDOWN, NOPERM, INTERNAL.
std::string_view StatusWord(StatusCode code);

// The code for a word, case-insensitively. Besides StatusWord's words it reads Redis' own error
// words (ERR, WRONGTYPE, NOPROTO -> kInvalidArgument; NOAUTH, WRONGPASS -> kPermissionDenied) and
// StatusCodeName's spellings. An unknown word gives kInternal, and *known = false.
StatusCode StatusCodeFromWord(std::string_view word, bool* known = nullptr);

}  // namespace kvtier::resp
