#include "common/keys.h"

namespace kvtier {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void StoreBigEndian(uint64_t v, std::byte* out) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<std::byte>(v & 0xff);
    v >>= 8;
  }
}

uint64_t LoadBigEndian(const std::byte* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint64_t>(in[i]);
  return v;
}

}  // namespace

std::string Key128::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    uint64_t half = i < 8 ? high : low;
    int shift = 60 - 4 * (i % 8) * 2;
    out[2 * i] = kDigits[(half >> shift) & 0xf];
    out[2 * i + 1] = kDigits[(half >> (shift - 4)) & 0xf];
  }
  return out;
}

std::optional<Key128> Key128::FromHex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  Key128 k;
  for (size_t i = 0; i < 32; ++i) {
    int v = HexValue(hex[i]);
    if (v < 0) return std::nullopt;
    uint64_t& half = i < 16 ? k.high : k.low;
    half = (half << 4) | static_cast<uint64_t>(v);
  }
  return k;
}

void Key128::ToBytes(std::byte out[16]) const {
  StoreBigEndian(high, out);
  StoreBigEndian(low, out + 8);
}

Key128 Key128::FromBytes(const std::byte in[16]) {
  return Key128{LoadBigEndian(in), LoadBigEndian(in + 8)};
}

}  // namespace kvtier
