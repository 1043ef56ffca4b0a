#include "daemon/store/reservation_table.h"

namespace kvtier::store {

bool ReservationTable::Full() const {
  MutexLock lock(mu_);
  return reservations_.size() >= max_;
}

void ReservationTable::Add(uint64_t id, const ReservationRecord& record) {
  MutexLock lock(mu_);
  reservations_.emplace(id, record);
}

std::optional<ReservationRecord> ReservationTable::Find(uint64_t id, bool erase) {
  MutexLock lock(mu_);
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return std::nullopt;
  ReservationRecord record = it->second;
  if (erase) reservations_.erase(it);
  return record;
}

std::optional<ReservationRecord> ReservationTable::Quarantine(uint64_t id, uint64_t until_us) {
  MutexLock lock(mu_);
  auto it = reservations_.find(id);
  if (it == reservations_.end() || it->second.expired) return std::nullopt;
  it->second.expired = true;
  it->second.deadline_us = until_us;
  return it->second;
}

bool ReservationTable::Renew(uint64_t id, uint64_t deadline_us) {
  MutexLock lock(mu_);
  auto it = reservations_.find(id);
  if (it == reservations_.end() || it->second.expired) return false;
  it->second.deadline_us = deadline_us;
  return true;
}

ReservationTable::Expired ReservationTable::Expire(uint64_t now_us, uint64_t quarantine_us) {
  Expired out;
  MutexLock lock(mu_);
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    ReservationRecord& r = it->second;
    if (r.deadline_us > now_us) {
      ++it;
    } else if (!r.expired) {
      r.expired = true;
      r.deadline_us = now_us + quarantine_us;
      out.timed_out.push_back(r);
      ++it;
    } else {
      out.released.push_back(r);
      it = reservations_.erase(it);
    }
  }
  return out;
}

size_t ReservationTable::quarantined() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [id, r] : reservations_) n += r.expired ? 1 : 0;
  return n;
}

}  // namespace kvtier::store
