#include "client/reply_mapping.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>

#include "common/resp/protocol.h"

namespace kvtier::client {
namespace {

using resp::Reply;
using resp::ReplyType;

Status Unexpected(std::string_view command, const Reply& reply, std::string_view expected) {
  std::string msg = "protocol: unexpected reply to ";
  msg.append(command);
  msg += " (expected ";
  msg.append(expected);
  msg += "): ";
  msg += reply.DebugString(200);
  return Internal(std::move(msg));
}

bool IsText(const Reply& reply) {
  return reply.type == ReplyType::kSimpleString || reply.type == ReplyType::kBulkString ||
         reply.type == ReplyType::kVerbatim;
}

bool IsList(const Reply& reply) {
  return reply.type == ReplyType::kArray || reply.type == ReplyType::kSet;
}

// An unsigned number: an integer reply, or digits in a string.
bool ReadUnsigned(const Reply& reply, uint64_t* out) {
  if (reply.type == ReplyType::kInteger) {
    if (reply.integer < 0) return false;
    *out = static_cast<uint64_t>(reply.integer);
    return true;
  }
  if (!IsText(reply) || reply.str.empty() || reply.str.size() > 20) return false;
  uint64_t value = 0;
  for (char c : reply.str) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

// The status of a per-key entry: a status word in any string type, or an error.
Status EntryStatus(const Reply& entry, std::string_view context) {
  if (entry.is_error()) return ErrorReplyToStatus(entry, context);
  return StatusFromWord(entry.str, context);
}

}  // namespace

Status StatusFromWord(std::string_view word, std::string_view context) {
  bool known = false;
  const StatusCode code = StatusCodeFromWord(word, &known);
  if (code == StatusCode::kOk) return Status::Ok();
  std::string msg(context);
  msg += known ? ": " : ": unknown status word ";
  msg.append(word);
  return Status(code, std::move(msg));
}

Status ErrorReplyToStatus(const Reply& reply, std::string_view context) {
  const std::string_view text = reply.str;
  const size_t space = text.find(' ');
  const std::string_view word = text.substr(0, space);
  bool known = false;
  StatusCode code = StatusCodeFromWord(word, &known);
  // An error reply is never success, whatever its first word says.
  if (code == StatusCode::kOk) code = StatusCode::kInternal;
  std::string msg(context);
  msg += ": ";
  msg.append(known && space != std::string_view::npos ? text.substr(space + 1) : text);
  return Status(code, std::move(msg));
}

Status DecodeOk(const Reply& reply, std::string_view command, std::string_view expect) {
  if (reply.is_error()) return ErrorReplyToStatus(reply, command);
  if (reply.type == ReplyType::kSimpleString && (expect.empty() || reply.str == expect)) {
    return Status::Ok();
  }
  return Unexpected(command, reply, expect.empty() ? "a simple string" : expect);
}

Result<int64_t> DecodeInteger(const Reply& reply, std::string_view command) {
  if (reply.is_error()) return ErrorReplyToStatus(reply, command);
  if (reply.type == ReplyType::kInteger) return reply.integer;
  uint64_t value = 0;
  if (ReadUnsigned(reply, &value) && value <= INT64_MAX) return static_cast<int64_t>(value);
  return Unexpected(command, reply, "an integer");
}

Result<std::string> DecodeString(const Reply& reply, std::string_view command) {
  if (reply.is_error()) return ErrorReplyToStatus(reply, command);
  if (reply.is_null()) return NotFound(std::string(command) + ": no such key");
  if (IsText(reply)) return reply.str;
  return Unexpected(command, reply, "a string");
}

const Reply* FindField(const Reply& reply, std::string_view name) {
  if (reply.type != ReplyType::kMap && reply.type != ReplyType::kArray) return nullptr;
  for (size_t i = 0; i + 1 < reply.elements.size(); i += 2) {
    const Reply& key = reply.elements[i];
    if (IsText(key) && resp::EqualsIgnoreCase(key.str, name)) return &reply.elements[i + 1];
  }
  return nullptr;
}

Result<NamespaceInfo> DecodeRegister(const Reply& reply) {
  constexpr std::string_view kCommand = "KVT.REGISTER";
  if (reply.is_error()) return ErrorReplyToStatus(reply, kCommand);
  const Reply* ns = FindField(reply, "ns");
  const Reply* block_bytes = FindField(reply, "block_bytes");
  NamespaceInfo info;
  if (ns == nullptr || block_bytes == nullptr || !IsText(*ns) ||
      !ReadUnsigned(*block_bytes, &info.block_bytes)) {
    return Unexpected(kCommand, reply, "ns <hex> block_bytes <n>");
  }
  const std::optional<Key128> id = Key128::FromHex(ns->str);
  if (!id) return Unexpected(kCommand, reply, "a 32-digit hex namespace id");
  info.id = NamespaceId{*id};
  return info;
}

Result<LookupResult> DecodeLookup(const Reply& reply, size_t key_count) {
  constexpr std::string_view kCommand = "KVT.LOOKUP";
  if (reply.is_error()) return ErrorReplyToStatus(reply, kCommand);
  uint64_t prefix = 0;
  if (!IsList(reply) || reply.elements.size() != 2 || !ReadUnsigned(reply.elements[0], &prefix) ||
      !IsText(reply.elements[1])) {
    return Unexpected(kCommand, reply, "[prefix, tiers]");
  }
  const std::string& codes = reply.elements[1].str;
  if (prefix > key_count || codes.size() != prefix) {
    return Unexpected(kCommand, reply, "a prefix within the keys and one tier code per block");
  }
  LookupResult result;
  result.prefix = static_cast<size_t>(prefix);
  result.tiers.reserve(result.prefix);
  for (char c : codes) {
    const int code = c >= '0' ? c - '0' : static_cast<unsigned char>(c);
    if (code < 0 || code >= kTierCount) return Unexpected(kCommand, reply, "tier codes 0, 1, 2, 3");
    result.tiers.push_back(static_cast<TierId>(code));
  }
  return result;
}

Result<std::vector<Status>> DecodeStatusArray(const Reply& reply, size_t count,
                                              std::string_view command) {
  if (reply.is_error()) return ErrorReplyToStatus(reply, command);
  if (!IsList(reply) || reply.elements.size() != count) {
    return Unexpected(command, reply, std::to_string(count) + " status words");
  }
  std::vector<Status> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const Reply& entry = reply.elements[i];
    if (!entry.is_error() && !IsText(entry)) return Unexpected(command, reply, "status words");
    out.push_back(EntryStatus(entry, std::string(command) + " item " + std::to_string(i)));
  }
  return out;
}

Result<std::vector<SlotGrant>> DecodeGrants(const Reply& reply, size_t count,
                                            std::string_view command) {
  if (reply.is_error()) return ErrorReplyToStatus(reply, command);
  if (!IsList(reply) || reply.elements.size() > count) {
    return Unexpected(command, reply, "at most " + std::to_string(count) + " entries");
  }
  std::vector<SlotGrant> out(count);
  for (size_t i = 0; i < count; ++i) {
    const std::string context = std::string(command) + " item " + std::to_string(i);
    if (i >= reply.elements.size()) {
      out[i].status = NotFound(context + ": not answered (after a miss)");
      continue;
    }
    const Reply& entry = reply.elements[i];
    if (entry.is_error() || entry.is_null() || IsText(entry)) {
      out[i].status = entry.is_null() ? NotFound(context) : EntryStatus(entry, context);
      if (out[i].status.ok()) return Unexpected(command, reply, "[status, id, offset, ...]");
      continue;
    }
    SlotGrant& grant = out[i];
    uint64_t tier = static_cast<uint64_t>(TierId::kHost);
    if (!IsList(entry) || entry.elements.size() < 3 || !IsText(entry.elements[0]) ||
        !ReadUnsigned(entry.elements[1], &grant.id) ||
        !ReadUnsigned(entry.elements[2], &grant.offset) ||
        (entry.elements.size() > 3 && !ReadUnsigned(entry.elements[3], &grant.length)) ||
        (entry.elements.size() > 4 && !ReadUnsigned(entry.elements[4], &tier)) ||
        // A grant is never of the remote tier: a remote block is fetched into host memory first.
        tier > static_cast<uint64_t>(TierId::kNvme)) {
      return Unexpected(command, reply, "[status, id, offset, ...] per key");
    }
    grant.status = StatusFromWord(entry.elements[0].str, context);
    grant.tier = static_cast<TierId>(tier);
  }
  return out;
}

Result<ArenaInfo> DecodeAttach(const Reply& reply) {
  constexpr std::string_view kCommand = "KVT.ATTACH";
  if (reply.is_error()) return ErrorReplyToStatus(reply, kCommand);
  const Reply* bytes = FindField(reply, "arena_bytes");
  ArenaInfo info;
  if (bytes == nullptr || !ReadUnsigned(*bytes, &info.arena_bytes)) {
    return Unexpected(kCommand, reply, "arena_bytes <n> tier <name>");
  }
  const Reply* tier = FindField(reply, "tier");
  if (tier != nullptr && IsText(*tier)) info.tier = tier->str;
  return info;
}

Result<GpuPoolExport> DecodeGpuAttach(const Reply& reply) {
  constexpr std::string_view kCommand = "KVT.GPUATTACH";
  if (reply.is_error()) return ErrorReplyToStatus(reply, kCommand);
  const Reply* kind = FindField(reply, "kind");
  const Reply* bytes = FindField(reply, "pool_bytes");
  const Reply* device = FindField(reply, "device");
  const Reply* handle = FindField(reply, "handle");
  GpuPoolExport out;
  if (kind == nullptr || !IsText(*kind) || bytes == nullptr ||
      !ReadUnsigned(*bytes, &out.pool_bytes) || device == nullptr ||
      device->type != ReplyType::kInteger || device->integer < -1 || device->integer > INT32_MAX ||
      handle == nullptr || !IsText(*handle)) {
    return Unexpected(kCommand, reply, "kind <name> pool_bytes <n> device <d> handle <bytes>");
  }
  out.kind = kind->str;
  out.device = static_cast<int>(device->integer);
  out.handle = handle->str;
  return out;
}

// Decodes the grant replies of one batch of chunked RESERVE or ACQUIRE commands. A command the
// daemon refused as a whole gives each of its keys that status.
Result<std::vector<SlotGrant>> DecodeChunkedGrants(std::span<const resp::Reply> replies,
                                                   size_t key_count, size_t chunk_keys,
                                                   std::string_view command) {
  std::vector<SlotGrant> grants;
  grants.reserve(key_count);
  for (size_t c = 0; c < replies.size(); ++c) {
    const size_t chunk = std::min(chunk_keys, key_count - c * chunk_keys);
    if (replies[c].is_error()) {
      const Status status = ErrorReplyToStatus(replies[c], command);
      for (size_t i = 0; i < chunk; ++i) grants.push_back(SlotGrant{status});
      continue;
    }
    KVTIER_ASSIGN_OR_RETURN(std::vector<SlotGrant> part, DecodeGrants(replies[c], chunk, command));
    std::move(part.begin(), part.end(), std::back_inserter(grants));
  }
  return grants;
}

// Per-id statuses of chunked COMMIT/ABORT/RELEASE replies, in id order.
Result<std::vector<Status>> DecodeChunkedStatuses(std::span<const resp::Reply> replies,
                                                  size_t id_count, size_t chunk_ids,
                                                  std::string_view command) {
  std::vector<Status> out;
  out.reserve(id_count);
  for (size_t c = 0; c < replies.size(); ++c) {
    const size_t chunk = std::min(chunk_ids, id_count - c * chunk_ids);
    KVTIER_ASSIGN_OR_RETURN(std::vector<Status> part,
                            DecodeStatusArray(replies[c], chunk, command));
    std::move(part.begin(), part.end(), std::back_inserter(out));
  }
  return out;
}

}  // namespace kvtier::client
