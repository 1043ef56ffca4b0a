// The `quotas` subtree of kvtierd's config file, parsed into DaemonConfig::quotas. Private to the
// config module (it names yaml-cpp's types):
//   quotas:
//     tenants:    {<salt>: {host: 8GiB, nvme: 100GiB}}
//     namespaces: {<namespace id, 32 hex digits>: {gpu: 2GiB}}
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "daemon/config/daemon_config.h"

namespace kvtier::config {

// Replaces config.quotas with the rules `node` (the value of `quotas`) gives. kInvalidArgument
// naming the key: an unknown section, a tier that is not gpu, host or nvme, a namespace id that is
// not 32 hex digits, a size that does not parse.
Status ApplyQuotaNode(const YAML::Node& node, const std::string& source, DaemonConfig& config);

}  // namespace kvtier::config
