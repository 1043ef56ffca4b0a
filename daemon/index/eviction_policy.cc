#include "daemon/index/eviction_policy.h"

#include "daemon/index/arc_policy.h"
#include "daemon/index/lru_policy.h"
#include "daemon/index/s3fifo_policy.h"
#include "daemon/index/sticky_lru_policy.h"
#include "daemon/index/tinylfu_policy.h"

namespace kvtier::index {

std::vector<std::string> EvictionPolicyNames() {
  return {std::string(kDefaultEvictionPolicy), "lru", "arc", "s3fifo", "tinylfu"};
}

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                           size_t capacity_hint_blocks,
                                                           PolicyClock clock) {
  if (name == "lru") return std::unique_ptr<EvictionPolicy>(std::make_unique<LruPolicy>());
  if (name == "arc") {
    return std::unique_ptr<EvictionPolicy>(std::make_unique<ArcPolicy>(capacity_hint_blocks));
  }
  if (name == "s3fifo") {
    return std::unique_ptr<EvictionPolicy>(std::make_unique<S3FifoPolicy>(capacity_hint_blocks));
  }
  if (name == "tinylfu") {
    return std::unique_ptr<EvictionPolicy>(std::make_unique<TinyLfuPolicy>(capacity_hint_blocks));
  }
  if (name == "sticky") {
    if (!clock) clock = StickyLruPolicy::SteadyMillis;
    return std::unique_ptr<EvictionPolicy>(
        std::make_unique<StickyLruPolicy>(capacity_hint_blocks, std::move(clock)));
  }
  std::string known;
  for (const std::string& n : EvictionPolicyNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgument("unknown eviction policy '" + std::string(name) + "' (known: " + known +
                         ")");
}

}  // namespace kvtier::index
