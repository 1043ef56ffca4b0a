#include "common/types.h"

namespace kvtier {

std::string_view TierName(TierId tier) {
  switch (tier) {
    case TierId::kGpu:
      return "gpu";
    case TierId::kHost:
      return "host";
    case TierId::kNvme:
      return "nvme";
    case TierId::kRemote:
      return "remote";
  }
  return "unknown";
}

std::optional<TierId> TierFromName(std::string_view name) {
  for (TierId tier : {TierId::kGpu, TierId::kHost, TierId::kNvme, TierId::kRemote}) {
    if (TierName(tier) == name) return tier;
  }
  return std::nullopt;
}

}  // namespace kvtier
