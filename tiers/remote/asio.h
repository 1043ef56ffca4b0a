// The Boost.Asio headers the remote store client uses, after common/asio_coro.h (which carries the
// fixes Boost 1.74 needs on this toolchain and the one rule for co_await: read it). Every file of
// this module that uses Asio includes this header instead of <boost/asio.hpp>. Also the names the
// module's coroutines share.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>

#include "common/asio_coro.h"

namespace kvtier::tiers::remote {

namespace asio = boost::asio;

template <typename T>
using Awaitable = asio::awaitable<T>;

// Every call carries one absolute deadline, shared by all its rounds, connections and retries.
using Deadline = std::chrono::steady_clock::time_point;

}  // namespace kvtier::tiers::remote
