#include "common/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

namespace kvtier {
namespace {

struct Suffix {
  std::string_view name;
  double multiplier;
};

constexpr Suffix kSuffixes[] = {
    {"", 1.0},          {"B", 1.0},
    {"K", 1024.0},      {"KIB", 1024.0},         {"KB", 1e3},
    {"M", 1048576.0},   {"MIB", 1048576.0},      {"MB", 1e6},
    {"G", 1073741824.0}, {"GIB", 1073741824.0},  {"GB", 1e9},
    {"T", 1099511627776.0}, {"TIB", 1099511627776.0}, {"TB", 1e12},
};

}  // namespace

Result<uint64_t> ParseBytes(std::string_view text) {
  std::string original(text);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) {
    return InvalidArgument("size '" + original + "' does not start with a number");
  }
  std::string number(text.substr(0, digits));
  std::string suffix;
  for (char c : text.substr(digits)) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  char* end = nullptr;
  double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) {
    return InvalidArgument("size '" + original + "' is not a number");
  }
  for (const Suffix& s : kSuffixes) {
    if (s.name == suffix) {
      double bytes = std::floor(value * s.multiplier);
      if (bytes >= 18446744073709551615.0) {
        return InvalidArgument("size '" + original + "' does not fit in 64 bits");
      }
      return static_cast<uint64_t>(bytes);
    }
  }
  return InvalidArgument("size '" + original + "' has unknown suffix '" + suffix +
                         "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, kUnits[unit]);
  }
  return buf;
}

}  // namespace kvtier
