// Small helpers shared by the benchmark programs: timing, percentiles and the one output format
// that bench/run.sh promises ("NAME VALUE UNIT", one figure per line).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

namespace kvtier::bench {

inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The median of `samples` (which it sorts).
inline double Median(std::vector<double>& samples) {
  std::sort(samples.begin(), samples.end());
  return samples.empty() ? 0.0 : samples[samples.size() / 2];
}

inline void PrintFigure(std::string_view name, double value, std::string_view unit) {
  std::printf("%.*s %.4g %.*s\n", static_cast<int>(name.size()), name.data(), value,
              static_cast<int>(unit.size()), unit.data());
  std::fflush(stdout);
}

// True when argv holds "--quick": fewer repetitions, for a smoke run.
inline bool QuickMode(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) return true;
  }
  return false;
}

// Keeps the compiler from discarding a computed value.
template <typename T>
inline void DoNotOptimize(const T& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}

}  // namespace kvtier::bench
