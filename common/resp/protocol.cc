#include "common/resp/protocol.h"

#include <algorithm>
#include <limits>

namespace kvtier::resp {

std::optional<int64_t> ParseInt64(std::string_view text) {
  if (text.empty()) return std::nullopt;
  bool negative = text.front() == '-';
  if (negative) text.remove_prefix(1);
  // At most 19 digits fit in 63 bits; checking the length first keeps the loop free of overflow
  // arithmetic except in the last step.
  if (text.empty() || text.size() > 19) return std::nullopt;
  if (text.front() == '0' && (text.size() > 1 || negative)) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  constexpr uint64_t kMaxPositive = std::numeric_limits<int64_t>::max();
  if (negative) {
    if (value > kMaxPositive + 1) return std::nullopt;
    // Negate in unsigned arithmetic so that INT64_MIN does not overflow.
    return static_cast<int64_t>(0 - value);
  }
  if (value > kMaxPositive) return std::nullopt;
  return static_cast<int64_t>(value);
}

void ReservePayload(std::string& payload, size_t extra, size_t declared_bytes) {
  const size_t needed = payload.size() + extra;
  if (needed <= payload.capacity()) return;
  payload.reserve(std::min(std::max(needed, payload.capacity() * 2), declared_bytes));
}

size_t ReadPayloadCrlf(std::string_view input, size_t& crlf_seen) {
  size_t taken = 0;
  while (crlf_seen < kCrlf.size() && taken < input.size() && input[taken] == kCrlf[crlf_seen]) {
    ++taken;
    ++crlf_seen;
  }
  return taken;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    char y = b[i];
    if (x >= 'a' && x <= 'z') x = static_cast<char>(x - 'a' + 'A');
    if (y >= 'a' && y <= 'z') y = static_cast<char>(y - 'a' + 'A');
    if (x != y) return false;
  }
  return true;
}

std::string ToUpperAscii(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

std::string ToLowerAscii(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string DescribeByte(char byte) {
  auto u = static_cast<unsigned char>(byte);
  if (u >= 0x20 && u < 0x7f) return std::string(1, byte);
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string{'\\', 'x', kHex[u >> 4], kHex[u & 0xf]};
}

}  // namespace kvtier::resp
