#include "daemon/placement/admission_policy.h"

#include <string>

namespace kvtier::placement {
namespace {

class AdmitAll final : public AdmissionPolicy {
 public:
  std::string_view name() const override { return "all"; }
  bool Admit(const index::BlockMeta&) const override { return true; }
};

class AdmitReused final : public AdmissionPolicy {
 public:
  std::string_view name() const override { return "reused"; }
  bool Admit(const index::BlockMeta& meta) const override { return meta.reads > 0; }
};

}  // namespace

std::vector<std::string_view> AdmissionPolicyNames() { return {"all", "reused"}; }

Result<std::unique_ptr<AdmissionPolicy>> MakeAdmissionPolicy(std::string_view name) {
  if (name == "all") return std::unique_ptr<AdmissionPolicy>(new AdmitAll());
  if (name == "reused") return std::unique_ptr<AdmissionPolicy>(new AdmitReused());
  return InvalidArgument("unknown NVMe admission policy '" + std::string(name) +
                         "'; known: all, reused");
}

}  // namespace kvtier::placement
