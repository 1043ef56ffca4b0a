#include "tiers/remote/command_batch.h"

#include "common/resp/protocol.h"
#include "common/resp/reply_writer.h"

namespace kvtier::tiers::remote {

void CommandBatch::Begin(size_t argc) {
  std::string header;
  resp::ReplyWriter(&header).AppendArrayHeader(argc);
  AppendOwned(header);
  ++commands_;
}

void CommandBatch::Arg(std::string_view bytes) { ArgParts({&bytes, 1}); }

void CommandBatch::ArgParts(std::span<const std::string_view> parts) {
  size_t length = 0;
  for (const std::string_view part : parts) length += part.size();
  std::string header;
  resp::ReplyWriter(&header).AppendBulkHeader(length);
  AppendOwned(header);
  for (const std::string_view part : parts) AppendPart(part);
  AppendOwned(resp::kCrlf);
}

void CommandBatch::Command(std::initializer_list<std::string_view> args) {
  Begin(args.size());
  for (const std::string_view arg : args) Arg(arg);
}

void CommandBatch::AppendPart(std::string_view part) {
  if (part.size() < kBorrowThresholdBytes) {
    AppendOwned(part);
    return;
  }
  pieces_.push_back(Piece{.owned = false, .data = part.data(), .length = part.size()});
  size_bytes_ += part.size();
}

void CommandBatch::AppendOwned(std::string_view bytes) {
  if (bytes.empty()) return;
  // Consecutive owned bytes share one piece: one iovec for a run of small commands.
  if (!pieces_.empty() && pieces_.back().owned) {
    pieces_.back().length += bytes.size();
  } else {
    pieces_.push_back(Piece{.owned = true, .offset = owned_.size(), .length = bytes.size()});
  }
  owned_.append(bytes);
  size_bytes_ += bytes.size();
}

std::vector<std::string_view> CommandBatch::Pieces() const {
  std::vector<std::string_view> out;
  out.reserve(pieces_.size());
  for (const Piece& p : pieces_) {
    out.emplace_back(p.owned ? owned_.data() + p.offset : p.data, p.length);
  }
  return out;
}

}  // namespace kvtier::tiers::remote
