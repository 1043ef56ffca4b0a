// The one way kvtier includes Boost.Asio's coroutine support, with the two fixes Boost 1.74 needs
// on this toolchain. The server and the HTTP endpoint include this before any other Asio header.
//
// - Boost 1.74's awaitable.hpp calls std::exchange without including <utility>; libstdc++ 12 no
//   longer pulls it in transitively.
// - Asio 1.74 only enables co_await for clang when <experimental/coroutine> exists (libc++). With
//   libstdc++ clang has the standard <coroutine> instead, which Asio already uses once co_await is
//   enabled, so it is enabled here by hand.
//
// One rule for every coroutine: a co_await is a statement of its own or initialises a local
// (`const bool ok = co_await Flush();`), never part of a condition, a return or a larger
// expression. gcc 12 miscompiles `if (!co_await f()) ...` nested in a block that is not entered:
// the awaited frame is never popped and is resumed again after it finished.
//
// clang 14 cannot emit -fsanitize=function's prologue data for split coroutine bodies: targets
// with coroutines turn that one check off in sanitizer builds (see daemon/server/CMakeLists.txt).
#pragma once

#include <utility>

#if defined(__clang__) && !defined(BOOST_ASIO_HAS_CO_AWAIT)
#define BOOST_ASIO_HAS_CO_AWAIT 1
#endif

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
