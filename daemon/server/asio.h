// The Boost.Asio headers the server uses, after common/asio_coro.h (which carries the fixes Boost
// 1.74 needs on this toolchain and the one rule for co_await: read it). Every server file that
// uses Asio includes this header instead of <boost/asio.hpp>.
#pragma once

#include "common/asio_coro.h"

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
