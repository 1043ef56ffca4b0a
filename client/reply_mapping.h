// Reply mapping: from the daemon's RESP replies (docs/protocol.md) to kvtier's Status and to the
// client's value types.
//
// Error replies (`-BUSY no room`) and per-key status words (`EXISTS`) map one to one onto
// StatusCode through the protocol's one table (common/resp/status_words.h), the one the daemon
// writes its replies with: the words docs/protocol.md lists (NOTFOUND, EXISTS, BUSY, REJECTED,
// INVALID, TIMEOUT, DEVICE, SHUTDOWN, NOPERM, INTERNAL, and ERR for a malformed request), Redis'
// own (WRONGTYPE, NOPROTO, NOAUTH, WRONGPASS), and StatusCodeName's spellings with their
// underscores (NOT_FOUND, ALREADY_EXISTS, DEVICE_ERROR, SHUTTING_DOWN, ...), case-insensitively.
// Any other word (DEVICEERROR, ALREADYEXISTS) maps to kInternal with the word in the message.
//
// The decoders check the shape of a reply (types, counts) and return kInternal, naming the
// command, when the daemon answers something the protocol does not allow: a version mismatch or a
// bug, never something the caller can fix by retrying. A reply that is an error maps to its
// Status. RESP2 flat arrays and RESP3 maps decode alike. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "client/client_types.h"
#include "common/resp/reply.h"
#include "common/resp/status_words.h"
#include "common/status.h"

namespace kvtier::client {

// The code for a status word or error code: the protocol's one table (common/resp/status_words.h).
using resp::StatusCodeFromWord;

// A status word as a Status: Ok() for "OK", otherwise the mapped code with `context` and the word
// as message ("KVT.PUT key 3: BUSY").
Status StatusFromWord(std::string_view word, std::string_view context);

// An error reply as a Status: its first word mapped, the rest as message, prefixed by `context`.
// Precondition: reply.is_error().
Status ErrorReplyToStatus(const resp::Reply& reply, std::string_view context);

// `+OK` (or any simple string when `expect` is empty). Errors: the reply's own error; kInternal for
// another shape.
Status DecodeOk(const resp::Reply& reply, std::string_view command, std::string_view expect = "OK");

// An integer reply (also accepted: a bulk or simple string of decimal digits).
Result<int64_t> DecodeInteger(const resp::Reply& reply, std::string_view command);

// A bulk, simple or verbatim string reply; kNotFound for a null.
Result<std::string> DecodeString(const resp::Reply& reply, std::string_view command);

// KVT.REGISTER: `ns <hex> block_bytes <n>` as a map or flat array.
Result<NamespaceInfo> DecodeRegister(const resp::Reply& reply);

// KVT.LOOKUP for `key_count` keys: `[prefix, tiers]`. Tier codes (TierId: 3 is the remote tier)
// are accepted as raw bytes 0..3 or as the digits '0'..'3'. kInternal when prefix exceeds
// key_count, the tier string's length differs from prefix, or a code is out of range.
Result<LookupResult> DecodeLookup(const resp::Reply& reply, size_t key_count);

// An array of exactly `count` per-key or per-id status words (KVT.PUT, KVT.COMMIT, ...).
Result<std::vector<Status>> DecodeStatusArray(const resp::Reply& reply, size_t count,
                                              std::string_view command);

// KVT.RESERVE (`[status, id, offset]` per key) or KVT.ACQUIRE (`[status, id, offset, length]`
// per key, plus the tier code as a fifth element on a connection that attached the GPU pool; the
// tier is host when it is absent). A reply shorter than `count` (a server that stops at the first
// miss) reports the missing keys as kNotFound. A tier code other than 0..2 is kInternal: a remote
// block (3) is fetched into host memory before it is leased.
Result<std::vector<SlotGrant>> DecodeGrants(const resp::Reply& reply, size_t count,
                                            std::string_view command);

// The replies of one batch of RESERVE or ACQUIRE commands that split `key_count` keys into
// commands of `chunk_keys` keys each, decoded into one grant per key. A command the daemon refused
// as a whole gives each of its keys that status.
Result<std::vector<SlotGrant>> DecodeChunkedGrants(std::span<const resp::Reply> replies,
                                                   size_t key_count, size_t chunk_keys,
                                                   std::string_view command);

// The per-id statuses of a batch of COMMIT, ABORT or RELEASE commands of `chunk_ids` ids each,
// in id order.
Result<std::vector<Status>> DecodeChunkedStatuses(std::span<const resp::Reply> replies,
                                                  size_t id_count, size_t chunk_ids,
                                                  std::string_view command);

// KVT.ATTACH: `arena_bytes <n> tier <name>`.
Result<ArenaInfo> DecodeAttach(const resp::Reply& reply);

// KVT.GPUATTACH: `kind <name> pool_bytes <n> device <d> handle <bytes>` (the fd is not in it).
Result<GpuPoolExport> DecodeGpuAttach(const resp::Reply& reply);

// The value of field `name` in a map or flat key/value array; nullptr when absent.
const resp::Reply* FindField(const resp::Reply& reply, std::string_view name);

}  // namespace kvtier::client
