// The one place the server includes Boost.Asio, with the two fixes Boost 1.74 needs on this
// toolchain. Every server file that uses Asio includes this header instead of <boost/asio.hpp>.
//
// - Boost 1.74's awaitable.hpp calls std::exchange without including <utility>; libstdc++ 12 no
//   longer pulls it in transitively.
// - Asio 1.74 only enables co_await for clang when <experimental/coroutine> exists (libc++). With
//   libstdc++ clang has the standard <coroutine> instead, which Asio already uses once co_await is
//   enabled, so it is enabled here by hand.
//
// One rule for every coroutine in the server: a co_await is a statement of its own or initialises
// a local (`const bool ok = co_await Flush();`), never part of a condition, a return or a larger
// expression. gcc 12 miscompiles `if (!co_await f()) ...` nested in a block that is not entered:
// the awaited frame is never popped and is resumed again after it finished.
#pragma once

#include <utility>

#if defined(__clang__) && !defined(BOOST_ASIO_HAS_CO_AWAIT)
#define BOOST_ASIO_HAS_CO_AWAIT 1
#endif

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
