// MoverWaiters: a registered wait ends when the mover says it moved something, a registration
// that comes after such news is refused (so the news is never missed), and nothing is woken after
// Shutdown. The timers here would run for an hour: a wait that ends did so because it was woken.
#include "daemon/server/mover_waiters.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

namespace kvtier::server {
namespace {

using boost::asio::steady_timer;

class MoverWaitersTest : public ::testing::Test {
 protected:
  std::shared_ptr<steady_timer> LongTimer() {
    return std::make_shared<steady_timer>(boost::asio::make_strand(io_), std::chrono::hours(1));
  }
  // Starts a wait on `timer`; `ended` is set with its outcome once io_ runs it.
  void Wait(const std::shared_ptr<steady_timer>& timer, bool& ended, bool& aborted) {
    timer->async_wait([&ended, &aborted](const boost::system::error_code& ec) {
      ended = true;
      aborted = ec == boost::asio::error::operation_aborted;
    });
  }

  boost::asio::io_context io_;
  MoverWaiters waiters_;
};

TEST_F(MoverWaitersTest, ANotifyEndsEveryRegisteredWait) {
  auto a = LongTimer();
  auto b = LongTimer();
  bool a_ended = false, a_aborted = false, b_ended = false, b_aborted = false;
  const uint64_t seen = waiters_.Generation();
  ASSERT_TRUE(waiters_.Register(seen, a));
  ASSERT_TRUE(waiters_.Register(seen, b));
  Wait(a, a_ended, a_aborted);
  Wait(b, b_ended, b_aborted);
  waiters_.Notify();
  io_.run();  // returns only once both waits ended
  EXPECT_TRUE(a_ended && a_aborted);
  EXPECT_TRUE(b_ended && b_aborted);
}

TEST_F(MoverWaitersTest, NewsThatCameBeforeTheRegistrationRefusesIt) {
  const uint64_t seen = waiters_.Generation();
  waiters_.Notify();  // the move ended while the command was asking the store
  EXPECT_FALSE(waiters_.Register(seen, LongTimer()));
  EXPECT_TRUE(waiters_.Register(waiters_.Generation(), LongTimer()));
}

TEST_F(MoverWaitersTest, ATimerGoneBeforeTheNotifyIsSkipped) {
  auto timer = LongTimer();
  ASSERT_TRUE(waiters_.Register(waiters_.Generation(), timer));
  timer.reset();
  waiters_.Notify();
  EXPECT_EQ(io_.run(), 0u);  // nothing was posted for it
}

TEST_F(MoverWaitersTest, AfterShutdownNothingIsRegisteredOrWoken) {
  auto timer = LongTimer();
  ASSERT_TRUE(waiters_.Register(waiters_.Generation(), timer));
  waiters_.Shutdown();
  waiters_.Notify();
  EXPECT_EQ(io_.run(), 0u);
  EXPECT_FALSE(waiters_.Register(waiters_.Generation(), LongTimer()));
}

}  // namespace
}  // namespace kvtier::server
