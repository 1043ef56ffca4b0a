// CircuitBreaker: stops a client from waiting on a node that keeps failing.
//
// A node that is down costs every call to it a connect timeout; one that hangs (SIGSTOP, a full
// disk, a partition) costs the whole call timeout. After `failure_threshold` failures in a row the
// breaker opens: calls to the node fail at once (the caller answers kBusy) for a backoff period.
// When it has passed, one call is let through as a probe (half-open); its success closes the
// breaker, its failure opens it again for twice as long, up to `max_backoff`. The backoff restarts
// from `initial_backoff` once the node has answered.
//
// Time is passed in, so tests need no clock. Not synchronised: one owner thread (the client's I/O
// thread) calls it. Every Allow() that returns true must be followed by exactly one
// RecordSuccess(), RecordFailure() or RecordNoVerdict().
#pragma once

#include <chrono>
#include <cstdint>

namespace kvtier::tiers::remote {

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    int failure_threshold = 3;
    std::chrono::milliseconds initial_backoff{200};
    std::chrono::milliseconds max_backoff{5000};
  };

  enum class State : uint8_t { kClosed, kOpen, kHalfOpen };

  explicit CircuitBreaker(Options options) : options_(options), backoff_(options.initial_backoff) {}

  // Whether a call may go to the node at `now`. Open and past its backoff: this call is the probe
  // (the state becomes kHalfOpen) and every other call is refused until it is recorded.
  bool Allow(Clock::time_point now);
  // The call answered. Returns true when this closes an open (half-open) breaker.
  bool RecordSuccess();
  // The call failed (connection refused or lost, timeout). Returns true when this opens a closed
  // breaker: the start of an episode, which the caller counts and logs once. A failed probe
  // reopens it for a longer backoff and returns false.
  bool RecordFailure(Clock::time_point now);
  // The call ended without saying anything of the node (it waited for the client's own busy
  // connections, it timed out having given the node too little time to judge it, or the client
  // is shutting down): the failure count stays, and a probe is due again at once.
  void RecordNoVerdict();

  State state() const { return state_; }
  bool open() const { return state_ != State::kClosed; }
  // Whether Allow(now) would refuse a call: open within its backoff, or half-open with its probe
  // out. An open breaker past its backoff does not refuse: the next call is its probe, and a
  // caller that picks among nodes must send it one, or the breaker never closes.
  bool Refuses(Clock::time_point now) const {
    return state_ == State::kHalfOpen || (state_ == State::kOpen && now < retry_at_);
  }
  int consecutive_failures() const { return failures_; }
  // When the next probe may go (meaningful while open).
  Clock::time_point retry_at() const { return retry_at_; }
  std::chrono::milliseconds backoff() const { return backoff_; }

 private:
  void Open(Clock::time_point now);

  Options options_;
  State state_ = State::kClosed;
  int failures_ = 0;
  std::chrono::milliseconds backoff_;
  Clock::time_point retry_at_{};
};

}  // namespace kvtier::tiers::remote
