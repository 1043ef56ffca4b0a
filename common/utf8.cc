#include "common/utf8.h"

#include <cstdint>

namespace kvtier {
namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// Bytes of the well-formed sequence that starts at text[at], or 0 when none does; `*prefix` is
// then the length of its longest valid prefix (at least 1: the lead byte itself), which is what
// one U+FFFD replaces. The second byte's range depends on the lead (RFC 3629, section 4): that
// is what excludes overlong forms, surrogates and code points above U+10FFFF.
size_t SequenceLength(std::string_view text, size_t at, size_t* prefix) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[at + i]); };
  const uint8_t lead = byte(0);
  *prefix = 1;
  if (lead < 0x80) return 1;
  size_t length = 0;
  uint8_t second_min = 0x80;
  uint8_t second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;  // below: overlong
    if (lead == 0xED) second_max = 0x9F;  // above: surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;  // below: overlong
    if (lead == 0xF4) second_max = 0x8F;  // above: beyond U+10FFFF
  } else {
    return 0;  // a continuation byte, an overlong lead (C0, C1) or F5..FF
  }
  for (size_t i = 1; i < length; ++i) {
    if (at + i >= text.size()) return 0;
    const uint8_t min = i == 1 ? second_min : 0x80;
    const uint8_t max = i == 1 ? second_max : 0xBF;
    if (byte(i) < min || byte(i) > max) return 0;
    *prefix = i + 1;
  }
  return length;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  size_t prefix = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t length = SequenceLength(text, at, &prefix);
    if (length == 0) return false;
    at += length;
  }
  return true;
}

std::string ReplaceInvalidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t prefix = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t length = SequenceLength(text, at, &prefix);
    if (length == 0) {
      out.append(kReplacementCharacter);
      at += prefix;
      continue;
    }
    out.append(text.substr(at, length));
    at += length;
  }
  return out;
}

}  // namespace kvtier
