#include "tiers/remote/remote_stats.h"

namespace kvtier::tiers::remote {
namespace {

// The fields in their one order, for both the snapshot and the visitor: fn(name, field of each
// struct in `s`), so that one walk pairs a live counter with its snapshot field.
template <typename Fn, typename... Stats>
void ForEachField(Fn&& fn, Stats&... s) {
  fn("batches", s.batches...);
  fn("requests", s.requests...);
  fn("hits", s.hits...);
  fn("misses", s.misses...);
  fn("errors_timeout", s.errors_timeout...);
  fn("errors_unavailable", s.errors_unavailable...);
  fn("errors_server", s.errors_server...);
  fn("errors_breaker", s.errors_breaker...);
  fn("errors_auth", s.errors_auth...);
  fn("moved_redirects", s.moved_redirects...);
  fn("ask_redirects", s.ask_redirects...);
  fn("replica_reads", s.replica_reads...);
  fn("new_owner_resends", s.new_owner_resends...);
  fn("replica_lookups", s.replica_lookups...);
  fn("replica_lookup_fallbacks", s.replica_lookup_fallbacks...);
  fn("topology_refreshes", s.topology_refreshes...);
  fn("topology_refresh_failures", s.topology_refresh_failures...);
  fn("breaker_openings", s.breaker_openings...);
  fn("connections_opened", s.connections_opened...);
  fn("bytes_out", s.bytes_out...);
  fn("bytes_in", s.bytes_in...);
  fn("masters", s.masters...);
  fn("open_breakers", s.open_breakers...);
}

}  // namespace

RemoteStats RemoteCounters::Snapshot() const {
  RemoteStats out;
  ForEachField(
      [](std::string_view, uint64_t& field, const std::atomic<uint64_t>& counter) {
        field = counter.load(std::memory_order_relaxed);
      },
      out, *this);
  return out;
}

void VisitRemoteStats(const RemoteStats& stats,
                      const std::function<void(std::string_view name, double value)>& visit) {
  ForEachField(
      [&](std::string_view name, uint64_t value) { visit(name, static_cast<double>(value)); },
      stats);
}

}  // namespace kvtier::tiers::remote
