// QuotaTable: the operators' byte quotas per tier, each for a tenant (every namespace registered
// with one tenant salt) or for one namespace, and the quota group each rule names in the index
// (daemon/index/block_index.h says what a group's quota does to eviction).
//
// A namespace's group is its own rule's, else its tenant's, else none (0). Rules are few (at most
// kMaxQuotaGroups - 1, each with a group of its own for the daemon's life) and change rarely (the
// config at start, KVT.QUOTA at run time).
//
// Thread safety: every method may be called from any thread; one lock, held for a scan of the
// rules.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/keys.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/types.h"

namespace kvtier::store {

struct QuotaSubject {
  enum class Kind : uint8_t { kNamespace, kTenant };
  Kind kind = Kind::kTenant;
  NamespaceId ns;      // kNamespace
  std::string tenant;  // kTenant: the tenant salt, as KVT.REGISTER's `salt` field gives it
  bool operator==(const QuotaSubject&) const = default;
  // "namespace <32 hex digits>" or "tenant <salt>".
  std::string ToString() const;
};

struct QuotaRule {
  QuotaSubject subject;
  uint8_t group = 0;
  std::array<uint64_t, kTierCount> bytes{};  // per TierId; 0: no quota in that tier
};

class QuotaTable {
 public:
  // Sets `subject`'s quota in `tier` (0 clears it; the rule, and its group, stay). Returns the
  // rule's group. kRejected when a new rule would need a group past the last.
  Result<uint8_t> Set(const QuotaSubject& subject, TierId tier, uint64_t bytes);
  // The group of a namespace with id `ns` and tenant salt `tenant` ("" for none): its own rule's,
  // else its tenant's, else 0.
  uint8_t GroupOf(const NamespaceId& ns, std::string_view tenant) const;
  std::optional<QuotaRule> Find(const QuotaSubject& subject) const;
  std::vector<QuotaRule> Rules() const;

 private:
  mutable Mutex mu_;
  std::vector<QuotaRule> rules_ GUARDED_BY(mu_);
};

}  // namespace kvtier::store
