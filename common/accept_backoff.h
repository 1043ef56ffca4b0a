// PauseAfterFailedAccept: what every accept loop of kvtierd (the RESP listeners, the HTTP
// endpoint) does when accept fails.
//
// The usual failure is EMFILE or ENFILE: no descriptor is left for the new connection. The
// connection stays queued, so the listener stays readable and the next accept fails at once; a
// loop that retries straight away burns a core until some client closes. Waiting a little
// instead costs a waiting client at most that long. Header-only, for the targets that already
// link Boost.
//
// Called from the coroutine that owns `timer`; stopping the timer's executor ends the wait.
#pragma once

// clang-format off: sorting would move it after Boost, which it must precede
#include "common/asio_coro.h"  // first: fixes Boost 1.74 coroutines on this toolchain
// clang-format on

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>

namespace kvtier {

// Long enough that a listener out of descriptors wakes 20 times a second, short enough that no
// client notices once a descriptor is free again.
inline constexpr std::chrono::milliseconds kAcceptRetryDelay{50};

// Counts the failure in `failures` (an operator's sign that the daemon ran out of descriptors),
// then waits kAcceptRetryDelay on `timer`. Returns early, without error, when the wait is
// cancelled.
inline boost::asio::awaitable<void> PauseAfterFailedAccept(boost::asio::steady_timer& timer,
                                                           std::atomic<uint64_t>& failures) {
  failures.fetch_add(1, std::memory_order_relaxed);
  boost::system::error_code ec;
  timer.expires_after(kAcceptRetryDelay);
  co_await timer.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
}

}  // namespace kvtier
