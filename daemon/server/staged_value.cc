#include "daemon/server/staged_value.h"

#include <algorithm>
#include <span>
#include <utility>

#include "common/resp/protocol.h"
#include "daemon/server/generic_keyspace.h"
#include "daemon/store/store.h"

namespace kvtier::server {
namespace {

bool IsPlainSetValue(const ServerContext& server, const Session& session,
                     const resp::RequestParser& parser) {
  const std::vector<std::string>& args = parser.partial_args();
  return session.authenticated() && server.arena.has_value() && args.size() == 3 &&
         parser.elements_left() == 0 && resp::EqualsIgnoreCase(args[0], "SET") &&
         args[1].size() <= server.options.max_key_bytes;
}

}  // namespace

void StagedValue::MaybeBegin(ServerContext& server, Session& session, resp::RequestParser& parser,
                             size_t waiting_in_socket) {
  if (reservation_ || declined_) return;
  const size_t declared = parser.bulk_declared_bytes();
  const size_t pending = parser.pending_bulk_bytes();
  if (declared < kStagedValueMinBytes || pending == 0) return;
  if (!IsPlainSetValue(server, session, parser)) {
    declined_ = true;
    return;
  }
  // Bytes waiting in the socket have arrived too: counting them lets the first big read of a
  // value that came in one burst go straight into the slot.
  const size_t arrived = declared - pending + std::min(waiting_in_socket, pending);
  if (arrived < declared / kStagedValueArrivedShare) return;  // not yet
  declined_ = true;  // one attempt per value, whatever its outcome
  const BlockKey placeholder = server.PlaceholderKey();
  Result<store::Reservation> r =
      server.store.BeginPut(server.generic_ns, placeholder, kGenericValueHeaderBytes + declared);
  if (!r.ok()) return;          // no room now: SET will say so, or find room later
  if (r->address == nullptr) {  // not plain memory: SET stages the value itself
    (void)server.store.AbortPut(r->id);
    return;
  }
  r->address[0] = kGenericValueFormat;
  if (!parser.DivertBulk(std::span<char>(
          reinterpret_cast<char*>(r->address) + kGenericValueHeaderBytes, declared))) {
    (void)server.store.AbortPut(r->id);
    return;
  }
  session.AddReservation(r->id, /*client_writes=*/false);
  reservation_ = r->id;
  server.counters.staged_values.fetch_add(1, std::memory_order_relaxed);
}

bool StagedValue::Renew(store::Store& store) const {
  return !reservation_ || store.RenewReservation(*reservation_);
}

void AbortStagedValue(ServerContext& server, Session& session, uint64_t reservation) {
  if (session.TakeReservation(reservation)) (void)server.store.AbortPut(reservation);
}

}  // namespace kvtier::server
