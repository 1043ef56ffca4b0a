#include "daemon/cli/block_bytes_flag.h"

#include <string>

#include "common/units.h"

namespace kvtier::cli {
namespace {

// ParseBlockBytes without the flag's name, which CLI11 puts in front of a validator's message.
Result<uint64_t> ParseSize(std::string_view text) {
  Result<uint64_t> bytes = ParseBytes(text);
  if (!bytes.ok() || *bytes == 0) {
    return InvalidArgument("'" + std::string(text) + "' is not a positive size");
  }
  if (*bytes > kMaxBlockBytes) {
    return InvalidArgument("'" + std::string(text) + "' is more than the " +
                           FormatBytes(kMaxBlockBytes) + " a block may have");
  }
  return *bytes;
}

}  // namespace

Result<uint64_t> ParseBlockBytes(std::string_view text) {
  Result<uint64_t> bytes = ParseSize(text);
  if (!bytes.ok()) return InvalidArgument("--block-bytes: " + bytes.status().message());
  return bytes;
}

CLI::Validator BlockBytesValidator() {
  return CLI::Validator(
      [](std::string& text) {
        Result<uint64_t> bytes = ParseSize(text);
        return bytes.ok() ? std::string() : bytes.status().message();
      },
      "SIZE");
}

}  // namespace kvtier::cli
