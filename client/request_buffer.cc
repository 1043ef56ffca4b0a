#include "client/request_buffer.h"

#include <algorithm>
#include <charconv>

namespace kvtier::client {

void RequestBuffer::AppendOwned(std::string_view bytes) {
  if (bytes.empty()) return;
  // Extend the last piece when it is owned and ends where the owned bytes end, so a run of small
  // arguments stays one iovec.
  if (!pieces_.empty() && pieces_.back().owned &&
      pieces_.back().offset + pieces_.back().length == owned_.size()) {
    pieces_.back().length += bytes.size();
  } else {
    pieces_.push_back(Piece{true, owned_.size(), nullptr, bytes.size()});
  }
  owned_.append(bytes);
  size_bytes_ += bytes.size();
}

void RequestBuffer::AppendLength(char type, size_t value) {
  char text[24];
  text[0] = type;
  const auto result = std::to_chars(text + 1, text + sizeof(text) - 2, value);
  char* end = result.ptr;
  *end++ = '\r';
  *end++ = '\n';
  AppendOwned(std::string_view(text, static_cast<size_t>(end - text)));
}

void RequestBuffer::BeginCommand(size_t argc) {
  command_starts_.push_back(size_bytes_);
  AppendLength('*', argc);
}

size_t RequestBuffer::CommandAt(size_t offset) const {
  if (offset >= size_bytes_) return commands();
  const auto after = std::upper_bound(command_starts_.begin(), command_starts_.end(), offset);
  return after == command_starts_.begin()
             ? 0
             : static_cast<size_t>(after - command_starts_.begin()) - 1;
}

void RequestBuffer::AppendArg(std::string_view bytes) {
  AppendLength('$', bytes.size());
  AppendOwned(bytes);
  AppendOwned("\r\n");
}

void RequestBuffer::AppendArgView(std::string_view bytes) {
  AppendBulkHeader(bytes.size());
  AppendBorrowed(bytes.data(), bytes.size());
  EndBulk();
}

void RequestBuffer::AppendArg(uint64_t value) {
  char text[24];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  AppendArg(std::string_view(text, static_cast<size_t>(result.ptr - text)));
}

void RequestBuffer::AppendBulkHeader(size_t length) { AppendLength('$', length); }

void RequestBuffer::AppendBorrowed(const void* data, size_t length) {
  if (length < kBorrowThresholdBytes) {
    AppendCopied(data, length);
    return;
  }
  pieces_.push_back(Piece{false, 0, static_cast<const char*>(data), length});
  size_bytes_ += length;
}

void RequestBuffer::AppendCopied(const void* data, size_t length) {
  AppendOwned(std::string_view(static_cast<const char*>(data), length));
}

void RequestBuffer::EndBulk() { AppendOwned("\r\n"); }

void RequestBuffer::Clear() {
  owned_.clear();
  pieces_.clear();
  command_starts_.clear();
  size_bytes_ = 0;
}

std::string RequestBuffer::Flatten() const {
  std::string out;
  out.reserve(size_bytes_);
  for (const Piece& piece : pieces_) out.append(PieceData(piece), piece.length);
  return out;
}

}  // namespace kvtier::client
