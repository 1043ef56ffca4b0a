// Human-readable byte sizes: "512MiB", "4GiB", "1.5GB", "4096".
//
// Binary suffixes (KiB, MiB, GiB, TiB, also K/M/G/T) are powers of 1024; decimal ones (KB, MB, GB,
// TB) are powers of 1000, as an operator reading `df -h` or a disk label expects.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier {

// Parses a size. Errors: kInvalidArgument for an empty string, an unknown suffix, a negative or
// non-numeric value, or a value that does not fit in 64 bits.
Result<uint64_t> ParseBytes(std::string_view text);

// "2.0 MiB", "512 B", "3.5 GiB": for tables and logs, not for round-tripping.
std::string FormatBytes(uint64_t bytes);

}  // namespace kvtier
