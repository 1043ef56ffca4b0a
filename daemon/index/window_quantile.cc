#include "daemon/index/window_quantile.h"

#include <algorithm>
#include <bit>

namespace kvtier::index {

size_t WindowQuantile::BucketOf(uint32_t value) {
  if (value < kLinear) return value;
  const int exponent = std::bit_width(value) - 1;  // kSubBits .. 31
  const uint32_t sub = (value >> (exponent - kSubBits)) & (kLinear - 1);
  return kLinear + static_cast<size_t>(exponent - kSubBits) * kLinear + sub;
}

uint64_t WindowQuantile::BucketStart(size_t bucket) {
  if (bucket < kLinear) return bucket;
  const size_t exponent = (bucket - kLinear) / kLinear + kSubBits;
  const uint64_t sub = (bucket - kLinear) % kLinear;
  return (uint64_t{1} << exponent) + (sub << (exponent - kSubBits));
}

void WindowQuantile::Add(uint32_t value) {
  if (values_.size() < window_) {
    values_.push_back(value);
  } else {
    --counts_[BucketOf(values_[next_])];
    values_[next_] = value;
    next_ = (next_ + 1) % window_;
  }
  ++counts_[BucketOf(value)];
}

uint32_t WindowQuantile::Quantile(double q) {
  size_t rank = static_cast<size_t>(static_cast<double>(values_.size()) * q);
  size_t bucket = 0;
  while (rank >= counts_[bucket]) rank -= counts_[bucket++];
  const uint64_t low = BucketStart(bucket);
  const uint64_t width = BucketStart(bucket + 1) - low;
  if (width == 1) return static_cast<uint32_t>(low);
  // The bucket's values, copied without a branch per value (a bucket may hold half the window).
  scratch_.resize(values_.size());
  size_t found = 0;
  for (const uint32_t value : values_) {
    scratch_[found] = value;
    found += value - low < width ? 1 : 0;  // wraps above `width` below the bucket
  }
  scratch_.resize(found);
  const auto at = scratch_.begin() + static_cast<ptrdiff_t>(rank);
  std::nth_element(scratch_.begin(), at, scratch_.end());
  return *at;
}

}  // namespace kvtier::index
