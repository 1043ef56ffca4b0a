#include "daemon/server/wire.h"

#include <charconv>

namespace kvtier::server {

void AppendStatusError(resp::ReplyWriter& reply, const Status& status) {
  reply.AppendError(status);
}

std::optional<uint64_t> ParseUint64(std::string_view text) {
  if (text.empty() || (text.size() > 1 && text.front() == '0')) return std::nullopt;
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<NamespaceId> ParseNamespaceId(std::string_view hex) {
  std::optional<Key128> k = Key128::FromHex(hex);
  if (!k) return std::nullopt;
  NamespaceId ns;
  ns.high = k->high;
  ns.low = k->low;
  return ns;
}

}  // namespace kvtier::server
