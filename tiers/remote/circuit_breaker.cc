#include "tiers/remote/circuit_breaker.h"

#include <algorithm>

namespace kvtier::tiers::remote {

bool CircuitBreaker::Allow(Clock::time_point now) {
  // Refused while a probe is out (its answer decides) or within the backoff.
  if (Refuses(now)) return false;
  if (state_ == State::kOpen) state_ = State::kHalfOpen;  // this call is the probe
  return true;
}

bool CircuitBreaker::RecordSuccess() {
  const bool was_open = state_ != State::kClosed;
  state_ = State::kClosed;
  failures_ = 0;
  backoff_ = options_.initial_backoff;
  return was_open;
}

bool CircuitBreaker::RecordFailure(Clock::time_point now) {
  ++failures_;
  if (state_ == State::kHalfOpen) {
    backoff_ = std::min(backoff_ * 2, options_.max_backoff);
    Open(now);
    return false;
  }
  if (state_ == State::kClosed && failures_ >= options_.failure_threshold) {
    Open(now);
    return true;
  }
  return false;
}

void CircuitBreaker::RecordNoVerdict() {
  if (state_ == State::kHalfOpen) state_ = State::kOpen;  // retry_at_ has passed already
}

void CircuitBreaker::Open(Clock::time_point now) {
  state_ = State::kOpen;
  retry_at_ = now + backoff_;
}

}  // namespace kvtier::tiers::remote
