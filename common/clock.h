// Clock: the source of "now" for lease and reservation deadlines.
//
// Components take a Clock& instead of calling steady_clock directly so that tests can move time
// forward deterministically (FakeClock) instead of sleeping. Both are safe from any thread.
#pragma once

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvtier {

class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds on a monotonic clock with an arbitrary origin.
  virtual uint64_t NowMicros() const = 0;
  // Milliseconds on the same clock, read as cheaply as the platform allows (a few milliseconds
  // coarse): for stamps taken on every block touched (eviction policies), not for deadlines.
  virtual uint64_t NowMillisCoarse() const { return NowMicros() / 1000; }
};

class SteadyClock final : public Clock {
 public:
  uint64_t NowMicros() const override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
  // CLOCK_MONOTONIC_COARSE: the same origin as steady_clock on Linux, without reading the TSC.
  uint64_t NowMillisCoarse() const override {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1'000'000;
  }
  // A process-wide instance for production code.
  static SteadyClock& Instance() {
    static SteadyClock clock;
    return clock;
  }
};

// Microseconds since the Unix epoch on the wall clock: for what is written down and read back by
// another process or after a restart (on-disk timestamps), never for deadlines.
inline uint64_t UnixMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// A clock that moves only when told to.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(uint64_t start_us = 1'000'000) : now_us_(start_us) {}
  uint64_t NowMicros() const override { return now_us_.load(std::memory_order_relaxed); }
  void AdvanceMicros(uint64_t us) { now_us_.fetch_add(us, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> now_us_;
};

}  // namespace kvtier
