// --block-bytes of `kvtier bench` and `kvtier replay`: the payload size of one block, which both
// commands hold in memory (bench a batch per thread, replay a call's worth plus a copy to verify
// against). A mistyped size ("1TiB" for "1MiB") must be refused with a message naming the flag,
// at parse time and again before anything is allocated or registered, not end in bad_alloc.
// Pure functions; any thread.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace kvtier::cli {

// The largest block: 1 GiB. A KV block of today's engines is at most a few hundred MiB (512 tokens
// of a 70B model, 80 layers of 8 KV heads of 128 in fp16, are 160 MiB), and the commands hold
// more than one block at a time, so a larger size is a typo, not a measurement.
inline constexpr uint64_t kMaxBlockBytes = uint64_t{1} << 30;

// The size `text` names ("4096", "2MiB"). kInvalidArgument naming --block-bytes when it does not
// parse, is 0, or is above kMaxBlockBytes; the caller prints it and exits.
Result<uint64_t> ParseBlockBytes(std::string_view text);

// The same check for CLI11, so that the parser refuses the flag before the command runs.
CLI::Validator BlockBytesValidator();

}  // namespace kvtier::cli
