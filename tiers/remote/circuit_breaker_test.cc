#include "tiers/remote/circuit_breaker.h"

#include <gtest/gtest.h>

namespace kvtier::tiers::remote {
namespace {

using std::chrono::milliseconds;
using Clock = CircuitBreaker::Clock;

CircuitBreaker Make() {
  return CircuitBreaker({.failure_threshold = 3,
                         .initial_backoff = milliseconds(100),
                         .max_backoff = milliseconds(350)});
}

TEST(CircuitBreaker, OpensAfterThresholdFailuresInARow) {
  CircuitBreaker b = Make();
  const auto t = Clock::time_point() + milliseconds(1000);
  EXPECT_FALSE(b.RecordFailure(t));
  EXPECT_FALSE(b.RecordFailure(t));
  b.RecordSuccess();  // a success in between starts the count again
  EXPECT_FALSE(b.RecordFailure(t));
  EXPECT_FALSE(b.RecordFailure(t));
  EXPECT_TRUE(b.Allow(t));
  EXPECT_TRUE(b.RecordFailure(t));  // the third in a row: an episode begins
  EXPECT_TRUE(b.open());
  EXPECT_FALSE(b.Allow(t + milliseconds(99)));
}

TEST(CircuitBreaker, OneProbeAfterBackoffAndItsAnswerDecides) {
  CircuitBreaker b = Make();
  const auto t = Clock::time_point() + milliseconds(1000);
  for (int i = 0; i < 3; ++i) (void)b.RecordFailure(t);
  EXPECT_TRUE(b.Allow(t + milliseconds(100)));
  EXPECT_EQ(b.state(), CircuitBreaker::State::kHalfOpen);
  EXPECT_FALSE(b.Allow(t + milliseconds(100)));  // one probe at a time
  EXPECT_TRUE(b.RecordSuccess());
  EXPECT_FALSE(b.open());
  EXPECT_TRUE(b.Allow(t + milliseconds(101)));
}

TEST(CircuitBreaker, ACallWithoutAVerdictLeavesTheCountAndFreesTheProbe) {
  CircuitBreaker b = Make();
  const auto t = Clock::time_point() + milliseconds(1000);
  (void)b.RecordFailure(t);
  (void)b.RecordFailure(t);
  b.RecordNoVerdict();  // closed: nothing changes, the next failure is still the third
  EXPECT_TRUE(b.RecordFailure(t));
  EXPECT_TRUE(b.Allow(t + milliseconds(100)));  // the probe
  b.RecordNoVerdict();                          // told nothing: the next call probes at once,
  EXPECT_EQ(b.state(), CircuitBreaker::State::kOpen);
  EXPECT_EQ(b.backoff(), milliseconds(100));  // without a longer backoff
  EXPECT_TRUE(b.Allow(t + milliseconds(100)));
  EXPECT_TRUE(b.RecordSuccess());
}

TEST(CircuitBreaker, RefusesExactlyWhenAllowWould) {
  CircuitBreaker b = Make();
  const auto t = Clock::time_point() + milliseconds(1000);
  EXPECT_FALSE(b.Refuses(t));
  for (int i = 0; i < 3; ++i) (void)b.RecordFailure(t);
  EXPECT_TRUE(b.Refuses(t + milliseconds(99)));
  // Past its backoff an open breaker lets the next call through as its probe: a caller choosing
  // a node by Refuses sends it one.
  EXPECT_FALSE(b.Refuses(t + milliseconds(100)));
  EXPECT_TRUE(b.open());
  EXPECT_TRUE(b.Allow(t + milliseconds(100)));
  EXPECT_TRUE(b.Refuses(t + milliseconds(100)));  // the probe is out
  EXPECT_TRUE(b.RecordSuccess());
  EXPECT_FALSE(b.Refuses(t + milliseconds(100)));
}

TEST(CircuitBreaker, FailedProbesDoubleTheBackoffUpToTheMaximum) {
  CircuitBreaker b = Make();
  auto t = Clock::time_point() + milliseconds(1000);
  for (int i = 0; i < 3; ++i) (void)b.RecordFailure(t);
  EXPECT_EQ(b.backoff(), milliseconds(100));
  for (const int expected : {200, 350, 350}) {
    t = b.retry_at();
    ASSERT_TRUE(b.Allow(t));
    EXPECT_FALSE(b.RecordFailure(t));  // a reopening is not a new episode
    EXPECT_EQ(b.backoff(), milliseconds(expected));
    EXPECT_EQ(b.retry_at(), t + milliseconds(expected));
  }
  ASSERT_TRUE(b.Allow(b.retry_at()));
  b.RecordSuccess();
  EXPECT_EQ(b.backoff(), milliseconds(100));
}

}  // namespace
}  // namespace kvtier::tiers::remote
