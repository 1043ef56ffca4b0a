// Helpers shared by ipc_test.cc and the helper process it starts (ipc_child.cc): the byte pattern
// both sides check, and the hex form in which the handle travels on the child's command line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::cuda::testing {

inline std::byte PatternByte(size_t i, uint8_t seed) {
  return std::byte(static_cast<uint8_t>(seed + i * 131 + (i >> 12)));
}

inline std::vector<std::byte> Pattern(size_t bytes, uint8_t seed) {
  std::vector<std::byte> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = PatternByte(i, seed);
  return out;
}

inline std::string ToHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

inline std::string FromHex(std::string_view hex) {
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(nibble(hex[i]) << 4 | nibble(hex[i + 1]));
  }
  return out;
}

}  // namespace kvtier::cuda::testing
