// WaitGroup: lets a coroutine wait until N coroutines it started have finished.
//
// Boost 1.74 has no parallel_group, so a timer that never expires on its own stands in for an
// event: Done() of the last child cancels it, which resumes the waiter. All on one thread (the
// client's I/O thread), so the count needs no atomics. Held by shared_ptr: the children hold it.
#pragma once

#include <cstddef>

#include "tiers/remote/asio.h"

namespace kvtier::tiers::remote {

class WaitGroup {
 public:
  WaitGroup(asio::io_context& io, size_t count)
      : timer_(io, asio::steady_timer::time_point::max()), remaining_(count) {}

  // One child finished.
  void Done() {
    if (--remaining_ == 0) timer_.cancel();
  }

  // Resumes once every child called Done(); at once when none is left.
  Awaitable<void> Wait() {
    // Checked before waiting: a cancel() with no wait pending would be lost.
    if (remaining_ == 0) co_return;
    boost::system::error_code ignored;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }

 private:
  asio::steady_timer timer_;
  size_t remaining_;
};

}  // namespace kvtier::tiers::remote
