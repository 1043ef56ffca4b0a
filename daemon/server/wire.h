// Small helpers shared by the command handlers: parsing of arguments (numbers, namespace ids,
// packed keys) and the mapping from Status codes to the error words of docs/protocol.md.
//
// All functions are pure (or only append to the given writer) and may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/keys.h"
#include "common/resp/reply_writer.h"
#include "common/resp/status_words.h"
#include "common/status.h"

namespace kvtier::server {

// The word a status is reported with on the wire (docs/protocol.md), shared with the clients.
using resp::StatusWord;

// `-<WORD> <message>`. Precondition: !status.ok().
void AppendStatusError(resp::ReplyWriter& reply, const Status& status);

// A decimal unsigned 64-bit integer with no sign, spaces or leading zeros ("0" itself is fine).
std::optional<uint64_t> ParseUint64(std::string_view text);

// 32 hex digits; nullopt otherwise.
std::optional<NamespaceId> ParseNamespaceId(std::string_view hex);

// Redis' reply to a bad number argument.
inline constexpr std::string_view kNotAnInteger = "ERR value is not an integer or out of range";

}  // namespace kvtier::server
