#include "daemon/server/session.h"

#include "daemon/store/store.h"

namespace kvtier::server {

void Session::EndAll() {
  for (uint64_t id : reservations_) (void)store_.AbortPut(id);
  reservations_.clear();
  for (uint64_t id : leases_) (void)store_.Release(id);
  leases_.clear();
  // The sets may have grown large for a client that held many ids at once; an idle connection
  // should not keep the buckets.
  std::unordered_set<uint64_t>().swap(reservations_);
  std::unordered_set<uint64_t>().swap(leases_);
}

}  // namespace kvtier::server
