#include "daemon/config/quota_config.h"

#include "common/keys.h"
#include "common/units.h"

namespace kvtier::config {

Status ApplyQuotaNode(const YAML::Node& node, const std::string& source, DaemonConfig& config) {
  if (node.IsNull()) {
    config.quotas.clear();
    return Status::Ok();
  }
  if (!node.IsMap()) return InvalidArgument(source + ": quotas: expected tenants and namespaces");
  std::vector<DaemonConfig::Quota> quotas;
  for (const auto& section : node) {
    const std::string kind = section.first.as<std::string>();
    if (kind != "tenants" && kind != "namespaces") {
      return InvalidArgument(source + ": quotas." + kind +
                             ": unknown key (expected tenants or namespaces)");
    }
    if (section.second.IsNull()) continue;
    if (!section.second.IsMap()) {
      return InvalidArgument(source + ": quotas." + kind + ": expected a mapping of " +
                             (kind == "tenants" ? "tenant salts" : "namespace ids") +
                             " to quotas per tier");
    }
    for (const auto& subject : section.second) {
      const std::string who = subject.first.as<std::string>();
      const std::string key = "quotas." + kind + "." + who;
      if (who.empty()) return InvalidArgument(source + ": quotas." + kind + ": an empty name");
      if (kind == "namespaces" && !NamespaceId::FromHex(who)) {
        return InvalidArgument(source + ": " + key + ": a namespace id is 32 hex digits");
      }
      if (!subject.second.IsMap()) {
        return InvalidArgument(source + ": " + key + ": expected sizes per tier (host: 8GiB)");
      }
      for (const auto& per_tier : subject.second) {
        const std::string tier_name = per_tier.first.as<std::string>();
        const std::optional<TierId> tier = TierFromName(tier_name);
        if (!tier || *tier == TierId::kRemote) {
          return InvalidArgument(source + ": " + key + "." + tier_name +
                                 ": unknown tier (expected gpu, host or nvme)");
        }
        if (!per_tier.second.IsScalar()) {
          return InvalidArgument(source + ": " + key + "." + tier_name + ": expected a size");
        }
        Result<uint64_t> bytes = ParseBytes(per_tier.second.Scalar());
        if (!bytes.ok()) {
          return InvalidArgument(source + ": " + key + "." + tier_name + ": " +
                                 bytes.status().message());
        }
        quotas.push_back({kind == "namespaces", who, *tier, *bytes});
      }
    }
  }
  config.quotas = std::move(quotas);
  return Status::Ok();
}

}  // namespace kvtier::config
