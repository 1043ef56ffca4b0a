#include "daemon/server/session.h"

#include "daemon/store/store.h"

namespace kvtier::server {

namespace {

// A table with at most this many buckets is kept as it is: rebuilding it would cost more than it
// holds (8 bytes a bucket).
constexpr size_t kKeepBuckets = 1024;

void ShrinkIfEmpty(std::unordered_set<uint64_t>& ids) {
  if (ids.empty() && ids.bucket_count() > kKeepBuckets) std::unordered_set<uint64_t>().swap(ids);
}

}  // namespace

void Session::ShrinkIfEmpty() {
  server::ShrinkIfEmpty(reservations_);
  server::ShrinkIfEmpty(client_written_);
  server::ShrinkIfEmpty(leases_);
}

void Session::EndAll() {
  for (uint64_t id : reservations_) {
    (void)(client_written_.contains(id) ? store_.AbandonPut(id) : store_.AbortPut(id));
  }
  reservations_.clear();
  client_written_.clear();
  for (uint64_t id : leases_) (void)store_.Release(id);
  leases_.clear();
  ShrinkIfEmpty();
}

}  // namespace kvtier::server
