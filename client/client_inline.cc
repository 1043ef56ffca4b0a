// Client: the inline payload path (KVT.PUT / KVT.GET), which works over any URL.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "client/client.h"
#include "client/reply_mapping.h"

namespace kvtier::client {
namespace {

// Keys of the first inline KVT.GET when the block size is not known in advance (the vector form):
// few enough that a reply of 64 MiB blocks stays within kMaxInlineCommandBytes, far below the
// reply parser's 4 GiB limit. The blocks it brings tell the size for the commands after it.
constexpr size_t kGetKeysPerCommandUnsized = 4;

size_t BlockBytes(ConstBlock block) {
  size_t total = 0;
  for (const ConstSegment& segment : block) total += segment.bytes;
  return total;
}

size_t BlockBytes(MutableBlock block) {
  size_t total = 0;
  for (const MutableSegment& segment : block) total += segment.bytes;
  return total;
}

// End of the chunk that starts at `start`: at least one block, at most kMaxKeysPerCommand, and no
// more than kMaxInlineCommandBytes of payload unless a single block is larger on its own.
template <typename Block>
size_t ChunkEnd(std::span<const Block> blocks, size_t start) {
  size_t end = start;
  size_t bytes = 0;
  while (end < blocks.size() && end - start < kMaxKeysPerCommand) {
    const size_t next = BlockBytes(blocks[end]);
    if (end > start && bytes + next > kMaxInlineCommandBytes) break;
    bytes += next;
    ++end;
  }
  return end;
}

void Scatter(const std::string& payload, MutableBlock block) {
  size_t at = 0;
  for (const MutableSegment& segment : block) {
    if (segment.bytes > 0) std::memcpy(segment.data, payload.data() + at, segment.bytes);
    at += segment.bytes;
  }
}

// Reads `reply`, a KVT.GET's for blocks [start, end) of the call: copies the leading payloads into
// their blocks, counting each in *served, and stops at the first miss (OK). Errors: the
// daemon's error reply; kInternal for a reply of another shape; kInvalidArgument for a payload
// whose block has another size.
Status ScatterGetReply(const resp::Reply& reply, std::span<const MutableBlock> blocks, size_t start,
                       size_t end, size_t* served) {
  if (reply.is_error()) return ErrorReplyToStatus(reply, "KVT.GET");
  if (reply.type != resp::ReplyType::kArray || reply.elements.size() != end - start) {
    return Internal("protocol: KVT.GET answered " + reply.DebugString(200));
  }
  for (size_t i = start; i < end; ++i) {
    const resp::Reply& payload = reply.elements[i - start];
    if (payload.is_null()) return Status::Ok();
    if (payload.type != resp::ReplyType::kBulkString) {
      return Internal("protocol: KVT.GET item is " + payload.DebugString(200));
    }
    if (payload.str.size() != BlockBytes(blocks[i])) {
      return InvalidArgument("KVT.GET: block " + std::to_string(i) + " is " +
                             std::to_string(payload.str.size()) + " bytes but its output is " +
                             std::to_string(BlockBytes(blocks[i])));
    }
    Scatter(payload.str, blocks[i]);
    ++*served;
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<Status>> Client::PutInline(const NamespaceId& ns,
                                              std::span<const BlockKey> keys,
                                              std::span<const std::span<const std::byte>> payloads) {
  std::vector<ConstSegment> segments;
  segments.reserve(payloads.size());
  for (std::span<const std::byte> payload : payloads) {
    segments.push_back(ConstSegment{payload.data(), payload.size()});
  }
  std::vector<ConstBlock> blocks;
  blocks.reserve(segments.size());
  for (const ConstSegment& segment : segments) blocks.emplace_back(&segment, 1);
  return PutInline(ns, keys, std::span<const ConstBlock>(blocks));
}

Result<std::vector<Status>> Client::PutInline(const NamespaceId& ns,
                                              std::span<const BlockKey> keys,
                                              std::span<const ConstBlock> blocks) {
  if (keys.size() != blocks.size()) {
    return InvalidArgument("KVT.PUT: " + std::to_string(keys.size()) + " keys but " +
                           std::to_string(blocks.size()) + " payloads");
  }
  std::vector<Status> statuses(keys.size());
  if (keys.empty()) return statuses;
  const std::string ns_hex = ns.ToHex();
  RequestBuffer request;
  std::vector<std::pair<size_t, size_t>> chunks;  // [start, end) of each command
  for (size_t start = 0; start < keys.size();) {
    const size_t end = ChunkEnd(blocks, start);
    request.BeginCommand(3 + (end - start));
    request.AppendArg("KVT.PUT");
    request.AppendArg(std::string_view(ns_hex));
    request.AppendArg(std::string_view(PackKeys(keys.subspan(start, end - start))));
    for (size_t i = start; i < end; ++i) {
      request.AppendBulkHeader(BlockBytes(blocks[i]));
      for (const ConstSegment& segment : blocks[i]) request.AppendBorrowed(segment.data, segment.bytes);
      request.EndBulk();
    }
    chunks.emplace_back(start, end);
    start = end;
  }
  KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, RoundTrip(request));
  for (size_t c = 0; c < chunks.size(); ++c) {
    const auto [start, end] = chunks[c];
    if (replies[c].is_error()) {
      // Refused as a whole (unknown namespace, a limit): every key of the command shares the fate.
      const Status status = ErrorReplyToStatus(replies[c], "KVT.PUT");
      std::fill(statuses.begin() + start, statuses.begin() + end, status);
      continue;
    }
    KVTIER_ASSIGN_OR_RETURN(std::vector<Status> part,
                            DecodeStatusArray(replies[c], end - start, "KVT.PUT"));
    std::move(part.begin(), part.end(), statuses.begin() + start);
  }
  return statuses;
}

Result<size_t> Client::GetInline(const NamespaceId& ns, std::span<const BlockKey> keys,
                                 std::span<const std::span<std::byte>> outputs) {
  std::vector<MutableSegment> segments;
  segments.reserve(outputs.size());
  for (std::span<std::byte> output : outputs) {
    segments.push_back(MutableSegment{output.data(), output.size()});
  }
  std::vector<MutableBlock> blocks;
  blocks.reserve(segments.size());
  for (const MutableSegment& segment : segments) blocks.emplace_back(&segment, 1);
  return GetInline(ns, keys, std::span<const MutableBlock>(blocks));
}

Result<size_t> Client::GetInline(const NamespaceId& ns, std::span<const BlockKey> keys,
                                 std::span<const MutableBlock> blocks) {
  if (keys.size() != blocks.size()) {
    return InvalidArgument("KVT.GET: " + std::to_string(keys.size()) + " keys but " +
                           std::to_string(blocks.size()) + " outputs");
  }
  if (keys.empty()) return size_t{0};
  const std::string ns_hex = ns.ToHex();
  // One command per round trip, the next only once this one was served whole: the daemon stops at
  // a miss within a command, but a command past it would read its blocks (from NVMe, perhaps) and
  // keep them warm for nothing. A call of one command is one round trip.
  size_t served = 0;
  while (served < keys.size()) {
    const size_t start = served;
    const size_t end = ChunkEnd(blocks, start);
    RequestBuffer request;
    request.BeginCommand(3);
    request.AppendArg("KVT.GET");
    request.AppendArg(std::string_view(ns_hex));
    request.AppendArg(std::string_view(PackKeys(keys.subspan(start, end - start))));
    Result<std::vector<resp::Reply>> replies = RoundTrip(request);
    if (!replies.ok()) return ServedOr(served, replies.status());
    const Status read = ScatterGetReply(replies->front(), blocks, start, end, &served);
    if (!read.ok()) return ServedOr(served, read);
    if (served < end) break;
  }
  return served;
}

Result<std::vector<std::string>> Client::GetInline(const NamespaceId& ns,
                                                   std::span<const BlockKey> keys) {
  std::vector<std::string> out;
  // As above, a command at a time while the prefix runs on; the first one asks for a few keys
  // only, the later ones for as many as kMaxInlineCommandBytes holds of the largest block so far.
  size_t per_command = kGetKeysPerCommandUnsized;
  size_t largest = 0;
  // The blocks already served when a later step fails, as ServedOr.
  const auto stop = [&out](Status failure) -> Result<std::vector<std::string>> {
    if (!out.empty()) return std::move(out);
    return failure;
  };
  while (out.size() < keys.size()) {
    const size_t count = std::min(per_command, keys.size() - out.size());
    RequestBuffer request;
    AppendKeyCommands(request, "KVT.GET", ns, keys.subspan(out.size(), count), count);
    Result<std::vector<resp::Reply>> replies = RoundTrip(request);
    if (!replies.ok()) return stop(replies.status());
    resp::Reply& reply = replies->front();
    if (reply.is_error()) return stop(ErrorReplyToStatus(reply, "KVT.GET"));
    if (reply.type != resp::ReplyType::kArray || reply.elements.size() != count) {
      return stop(Internal("protocol: KVT.GET answered " + reply.DebugString(200)));
    }
    for (resp::Reply& payload : reply.elements) {
      if (payload.is_null()) return out;
      if (payload.type != resp::ReplyType::kBulkString) {
        return stop(Internal("protocol: KVT.GET item is " + payload.DebugString(200)));
      }
      largest = std::max(largest, payload.str.size());
      out.push_back(std::move(payload.str));
    }
    per_command = std::clamp<size_t>(kMaxInlineCommandBytes / std::max<size_t>(largest, 1), 1,
                                     kMaxKeysPerCommand);
  }
  return out;
}

}  // namespace kvtier::client
