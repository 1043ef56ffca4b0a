#include "tiers/remote/circuit_breaker.h"

#include <algorithm>

namespace kvtier::tiers::remote {

bool CircuitBreaker::Allow(Clock::time_point now) {
  switch (state_) {
    case State::kClosed:
      return true;
    case State::kHalfOpen:
      return false;  // a probe is out; its answer decides
    case State::kOpen:
      if (now < retry_at_) return false;
      state_ = State::kHalfOpen;
      return true;
  }
  return false;
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

void CircuitBreaker::Open(Clock::time_point now) {
  state_ = State::kOpen;
  retry_at_ = now + backoff_;
}

}  // namespace kvtier::tiers::remote
