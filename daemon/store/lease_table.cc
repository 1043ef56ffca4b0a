#include "daemon/store/lease_table.h"

namespace kvtier::store {

bool LeaseTable::Full() const {
  MutexLock lock(mu_);
  return leases_.size() >= max_;
}

void LeaseTable::Add(uint64_t id, const LeaseRecord& record) {
  MutexLock lock(mu_);
  leases_.emplace(id, record);
}

std::optional<LeaseRecord> LeaseTable::Take(uint64_t id) {
  MutexLock lock(mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return std::nullopt;
  LeaseRecord record = it->second;
  leases_.erase(it);
  return record;
}

bool LeaseTable::Renew(uint64_t id, uint64_t deadline_us) {
  MutexLock lock(mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return false;
  it->second.deadline_us = deadline_us;
  return true;
}

std::optional<NamespaceId> LeaseTable::NamespaceOf(uint64_t id) const {
  MutexLock lock(mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return std::nullopt;
  return it->second.ns;
}

void LeaseTable::MarkCorrupt(uint64_t id) {
  MutexLock lock(mu_);
  auto it = leases_.find(id);
  if (it != leases_.end()) it->second.corrupt = true;
}

std::vector<LeaseRecord> LeaseTable::TakeExpired(uint64_t now_us) {
  std::vector<LeaseRecord> expired;
  MutexLock lock(mu_);
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.deadline_us <= now_us) {
      expired.push_back(it->second);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

size_t LeaseTable::size() const {
  MutexLock lock(mu_);
  return leases_.size();
}

}  // namespace kvtier::store
