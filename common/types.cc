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

}  // namespace kvtier
