// AdmissionPolicy: which blocks leaving the host tier are worth writing to NVMe.
//
// Every block demoted to an SSD costs a write of its full size and wears the device; a block that
// was put once and never read again will most likely never be read from NVMe either. The store
// asks the policy when it evicts a host block toward NVMe: admitted blocks are written there,
// refused ones are dropped (counted as admission drops). Policies are small, stateless classes
// chosen by name in config (nvme.admission).
//
// Thread safety: Admit is const and may be called from any thread.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/index/block_index.h"

namespace kvtier::placement {

class AdmissionPolicy {
 public:
  virtual ~AdmissionPolicy() = default;
  virtual std::string_view name() const = 0;
  // True when `meta`, a ready block about to leave a memory tier, should be written to NVMe.
  virtual bool Admit(const index::BlockMeta& meta) const = 0;
};

// "all": every block (the default: a cache that is large enough should keep everything).
// "reused": only blocks found by a lookup or read at least once after their put, i.e. seen twice.
std::vector<std::string_view> AdmissionPolicyNames();

// kInvalidArgument naming the known policies for an unknown name.
Result<std::unique_ptr<AdmissionPolicy>> MakeAdmissionPolicy(std::string_view name);

}  // namespace kvtier::placement
