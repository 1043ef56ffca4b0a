#include "daemon/server/session.h"

#include "daemon/store/store.h"

namespace kvtier::server {

namespace {

// A table with at most this many buckets is kept as it is: rebuilding it would cost more than it
// holds (8 bytes a bucket).
constexpr size_t kKeepBuckets = 1024;

template <typename Table>
void ShrinkIfEmpty(Table& ids) {
  if (ids.empty() && ids.bucket_count() > kKeepBuckets) Table().swap(ids);
}

}  // namespace

void Session::ShrinkIfEmpty() {
  server::ShrinkIfEmpty(reservations_);
  server::ShrinkIfEmpty(leases_);
}

void Session::EndAll() {
  for (const auto& [id, client_writes] : reservations_) {
    (void)(client_writes ? store_.AbandonPut(id) : store_.AbortPut(id));
  }
  reservations_.clear();
  for (uint64_t id : leases_) (void)store_.Release(id);
  leases_.clear();
  ShrinkIfEmpty();
}

}  // namespace kvtier::server
