#include "daemon/index/window_quantile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <random>
#include <vector>

namespace kvtier::index {
namespace {

// What the policy computed before: nth_element over a copy of the window.
uint32_t Selected(const std::deque<uint32_t>& window, double q) {
  std::vector<uint32_t> copy(window.begin(), window.end());
  const auto at = copy.begin() + static_cast<ptrdiff_t>(static_cast<double>(copy.size()) * q);
  std::nth_element(copy.begin(), at, copy.end());
  return *at;
}

// Streams of several shapes, checked at every step against a plain selection over the same
// window: small values (one bucket each), wide ranges (buckets of many values), many repeats
// (a bucket holding most of the window), the extremes of the range, and a window not yet full.
TEST(WindowQuantileTest, MatchesASelectionOverTheWindow) {
  std::mt19937_64 rng(17);
  const std::vector<std::function<uint32_t()>> shapes = {
      [&] { return static_cast<uint32_t>(rng() % 12); },
      [&] { return static_cast<uint32_t>(rng()); },
      [&] { return static_cast<uint32_t>(1000 + rng() % 3000); },
      [&] { return rng() % 4 == 0 ? static_cast<uint32_t>(rng() % 100000) : 4000u; },
      [&] { return rng() % 2 == 0 ? UINT32_MAX : static_cast<uint32_t>(rng() % 70); },
      [&] { return static_cast<uint32_t>(std::exp2(static_cast<double>(rng() % 320) / 10)); },
  };
  for (size_t s = 0; s < shapes.size(); ++s) {
    for (const size_t window : {1, 7, 300}) {
      WindowQuantile quantile(window);
      std::deque<uint32_t> model;
      for (int step = 0; step < 2000; ++step) {
        const uint32_t value = shapes[s]();
        quantile.Add(value);
        model.push_back(value);
        if (model.size() > window) model.pop_front();
        ASSERT_EQ(quantile.size(), model.size());
        for (const double q : {0.0, 0.5, 0.75, 0.99}) {
          ASSERT_EQ(quantile.Quantile(q), Selected(model, q))
              << "shape " << s << " window " << window << " step " << step << " q " << q;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::index
