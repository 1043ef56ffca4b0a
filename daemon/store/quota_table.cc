#include "daemon/store/quota_table.h"

#include "daemon/index/block_index.h"

namespace kvtier::store {

std::string QuotaSubject::ToString() const {
  return kind == Kind::kNamespace ? "namespace " + ns.ToHex() : "tenant " + tenant;
}

Result<uint8_t> QuotaTable::Set(const QuotaSubject& subject, TierId tier, uint64_t bytes) {
  MutexLock lock(mu_);
  for (QuotaRule& rule : rules_) {
    if (rule.subject == subject) {
      rule.bytes[static_cast<size_t>(tier)] = bytes;
      return rule.group;
    }
  }
  if (rules_.size() + 1 >= index::kMaxQuotaGroups) {
    return Rejected("at most " + std::to_string(index::kMaxQuotaGroups - 1) +
                    " tenants and namespaces can have quotas");
  }
  QuotaRule rule;
  rule.subject = subject;
  rule.group = static_cast<uint8_t>(rules_.size() + 1);
  rule.bytes[static_cast<size_t>(tier)] = bytes;
  rules_.push_back(rule);
  return rule.group;
}

uint8_t QuotaTable::GroupOf(const NamespaceId& ns, std::string_view tenant) const {
  MutexLock lock(mu_);
  uint8_t tenant_group = 0;
  for (const QuotaRule& rule : rules_) {
    if (rule.subject.kind == QuotaSubject::Kind::kNamespace && rule.subject.ns == ns) {
      return rule.group;
    }
    if (rule.subject.kind == QuotaSubject::Kind::kTenant && !tenant.empty() &&
        rule.subject.tenant == tenant) {
      tenant_group = rule.group;
    }
  }
  return tenant_group;
}

std::optional<QuotaRule> QuotaTable::Find(const QuotaSubject& subject) const {
  MutexLock lock(mu_);
  for (const QuotaRule& rule : rules_) {
    if (rule.subject == subject) return rule;
  }
  return std::nullopt;
}

std::vector<QuotaRule> QuotaTable::Rules() const {
  MutexLock lock(mu_);
  return rules_;
}

}  // namespace kvtier::store
