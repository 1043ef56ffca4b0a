// StagedValue: a large SET value received straight into a reserved arena slot.
//
// A SET of a 2 MiB value would otherwise cost three passes over its bytes after the kernel's:
// zero-filling its argument as it grows, the growth's reallocation copies, and the copy into the
// arena. Once enough of such a value has arrived, the connection reserves the value's block in the
// host tier under a placeholder key, diverts the parser's payload into the slot
// (RequestParser::DivertBulk), and SET publishes the reservation under the real key
// (Store::CommitPutAs) instead of copying. The reservation is renewed before every read into the
// slot, so a value may take as long as it needs to arrive while bytes keep coming. The first eighth
// of the value still goes into the argument: the space is reserved only when that much has arrived,
// so a client that declares a long value and sends little of it holds at most eight times what it
// sent, as the argument's own growth would (twice).
//
// The reservation is the session's, so a client that disconnects mid-value, or whose frame turns
// out malformed, has it aborted with the connection (Session::EndAll); nobody ever sees a partial
// value. A reservation that times out anyway (no byte for reservation_timeout) is found by that
// renewal (Renew()), and the connection closes without writing into space given back.
//
// One per connection, used only on its strand.
#pragma once

#include <cstdint>
#include <optional>

#include "common/resp/request_parser.h"
#include "daemon/server/server_context.h"
#include "daemon/server/session.h"

namespace kvtier::server {

// Values shorter than this are received into their argument as before.
inline constexpr size_t kStagedValueMinBytes = size_t{64} << 10;
// The slot is reserved once 1/kStagedValueArrivedShare of the value has arrived.
inline constexpr size_t kStagedValueArrivedShare = 8;

class StagedValue {
 public:
  // Called while the parser is inside a payload, with the bytes waiting in the socket: when that
  // payload is the value of a plain `SET key value` worth staging, reserves its slot and diverts
  // the parser into it. Does nothing otherwise, or when the store cannot make room now (the value
  // then goes into its argument).
  void MaybeBegin(ServerContext& server, Session& session, resp::RequestParser& parser,
                  size_t waiting_in_socket);
  bool active() const { return reservation_.has_value(); }
  // Renews the reservation before a read into its slot. False when it has ended (timed out): the
  // connection must stop reading into it.
  bool Renew(store::Store& store) const;
  // Hands the reservation to the command that finished receiving it.
  std::optional<uint64_t> Take() { return std::exchange(reservation_, std::nullopt); }
  // A new command begins: it may be staged again.
  void Reset() { declined_ = false; }

 private:
  std::optional<uint64_t> reservation_;
  bool declined_ = false;  // this command's value was not staged; do not ask the store again
};

// Aborts a staged reservation a command did not consume (it failed before publishing it).
void AbortStagedValue(ServerContext& server, Session& session, uint64_t reservation);

}  // namespace kvtier::server
