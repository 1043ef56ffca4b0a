// The tier tests every DeviceTier passes, typed over the implementation: FakeGpuTier always
// (fake_gpu_tier_test.cc, label unit) and GpuTier when built with CUDA (gpu_tier_test.cc, label
// gpu). A test file defines a traits struct per implementation,
//   struct Traits { static Result<std::unique_ptr<DeviceTier>> Make(const GpuTierOptions&);
//                   static bool Available(std::string* why); };
// and instantiates the suite with INSTANTIATE_TYPED_TEST_SUITE_P(Name, DeviceTierTest, Types).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tiers/gpu/device_tier.h"

namespace kvtier::tiers {

constexpr uint64_t kSuiteKiB = 1024;

inline std::vector<std::byte> SuitePattern(size_t size, uint8_t seed) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = std::byte(static_cast<uint8_t>(seed + i * 7));
  return bytes;
}

template <typename Traits>
class DeviceTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!Traits::Available(&why)) {
      if (std::getenv("KVTIER_REQUIRE_GPU") != nullptr) FAIL() << why;
      GTEST_SKIP() << why;
    }
  }

  std::unique_ptr<DeviceTier> Make(uint64_t capacity, uint64_t slab = 64 * kSuiteKiB) {
    GpuTierOptions options;
    options.capacity_bytes = capacity;
    options.slab_bytes = slab;
    Result<std::unique_ptr<DeviceTier>> tier = Traits::Make(options);
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    return tier.ok() ? std::move(tier).value() : nullptr;
  }
};

TYPED_TEST_SUITE_P(DeviceTierTest);

TYPED_TEST_P(DeviceTierTest, WriteReadRoundTrip) {
  std::unique_ptr<DeviceTier> tier = this->Make(256 * kSuiteKiB);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->id(), TierId::kGpu);
  Result<Extent> a = tier->Allocate(10000);
  Result<Extent> b = tier->Allocate(10000);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<std::byte> pa = SuitePattern(10000, 1), pb = SuitePattern(10000, 2);
  ASSERT_TRUE(tier->Write(*a, pa).ok());
  ASSERT_TRUE(tier->Write(*b, pb).ok());
  std::vector<std::byte> out(10000);
  ASSERT_TRUE(tier->Read(*a, out).ok());
  EXPECT_EQ(out, pa);
  ASSERT_TRUE(tier->Read(*b, out).ok());
  EXPECT_EQ(out, pb);
  std::vector<std::byte> head(100);
  ASSERT_TRUE(tier->Read(*a, head).ok());
  EXPECT_TRUE(std::equal(head.begin(), head.end(), pa.begin()));
  // Empty copies are no-ops.
  EXPECT_TRUE(tier->Write(*a, std::span<const std::byte>()).ok());
  EXPECT_TRUE(tier->Read(*a, std::span<std::byte>()).ok());
}

TYPED_TEST_P(DeviceTierTest, NotHostAddressableButHasDevicePointers) {
  std::unique_ptr<DeviceTier> tier = this->Make(256 * kSuiteKiB);
  ASSERT_NE(tier, nullptr);
  Result<Extent> a = tier->Allocate(4096);
  Result<Extent> b = tier->Allocate(4096);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(tier->Address(*a), nullptr);
  ASSERT_NE(tier->DevicePointer(*a), nullptr);
  EXPECT_EQ(static_cast<std::byte*>(tier->DevicePointer(*a)),
            static_cast<std::byte*>(tier->pool_base()) + a->offset);
  EXPECT_NE(tier->DevicePointer(*a), tier->DevicePointer(*b));
  EXPECT_EQ(tier->DevicePointer({tier->pool_bytes(), 1}), nullptr);
  EXPECT_GE(tier->pool_bytes(), 256 * kSuiteKiB);
}

TYPED_TEST_P(DeviceTierTest, OversizedOrOutOfRangeCopiesAreInvalid) {
  std::unique_ptr<DeviceTier> tier = this->Make(256 * kSuiteKiB);
  ASSERT_NE(tier, nullptr);
  Result<Extent> extent = tier->Allocate(100);
  ASSERT_TRUE(extent.ok());
  std::vector<std::byte> big(101);
  EXPECT_EQ(tier->Write(*extent, big).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Read(*extent, big).code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> small(10);
  EXPECT_EQ(tier->Write({256 * kSuiteKiB - 4, 10}, small).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Read({UINT64_MAX - 4, 10}, small).code(), StatusCode::kInvalidArgument);
}

TYPED_TEST_P(DeviceTierTest, StatsFollowAllocations) {
  std::unique_ptr<DeviceTier> tier = this->Make(256 * kSuiteKiB);
  ASSERT_NE(tier, nullptr);
  std::vector<Extent> extents;
  for (int i = 0; i < 16; ++i) {
    Result<Extent> extent = tier->Allocate(16 * kSuiteKiB);
    ASSERT_TRUE(extent.ok());
    extents.push_back(*extent);
  }
  TierStats stats = tier->Stats();
  EXPECT_EQ(stats.capacity_bytes, 256 * kSuiteKiB);
  EXPECT_EQ(stats.used_bytes, 256 * kSuiteKiB);
  EXPECT_EQ(stats.block_count, 16u);
  EXPECT_EQ(tier->Allocate(16 * kSuiteKiB).status().code(), StatusCode::kBusy);
  EXPECT_EQ(tier->Allocate(257 * kSuiteKiB).status().code(), StatusCode::kRejected);
  EXPECT_EQ(tier->Allocate(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->ReclaimUnit(extents[0], 4096), (Extent{0, 64 * kSuiteKiB}));
  for (const Extent& extent : extents) tier->Free(extent);
  stats = tier->Stats();
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_EQ(stats.reserved_bytes, 0u);
  EXPECT_EQ(stats.block_count, 0u);
  EXPECT_EQ(tier->invalid_free_count(), 0u);
}

TYPED_TEST_P(DeviceTierTest, InvalidFreeIsCountedAndHarmless) {
  std::unique_ptr<DeviceTier> tier = this->Make(256 * kSuiteKiB);
  ASSERT_NE(tier, nullptr);
  Result<Extent> extent = tier->Allocate(4096);
  ASSERT_TRUE(extent.ok());
  tier->Free(*extent);
  tier->Free(*extent);
  tier->Free({12 * kSuiteKiB, 4096});
  EXPECT_EQ(tier->invalid_free_count(), 2u);
  EXPECT_EQ(tier->Stats().block_count, 0u);
}

TYPED_TEST_P(DeviceTierTest, BlocksLargerThanASlabSpanSlabs) {
  std::unique_ptr<DeviceTier> tier = this->Make(1024 * kSuiteKiB);
  ASSERT_NE(tier, nullptr);
  Result<Extent> extent = tier->Allocate(200 * kSuiteKiB);
  ASSERT_TRUE(extent.ok()) << extent.status().ToString();
  const std::vector<std::byte> bytes = SuitePattern(200 * kSuiteKiB, 5);
  ASSERT_TRUE(tier->Write(*extent, bytes).ok());
  std::vector<std::byte> out(bytes.size());
  ASSERT_TRUE(tier->Read(*extent, out).ok());
  EXPECT_EQ(out, bytes);
}

// Threads allocating, writing, reading back and freeing their own blocks: the allocator and the
// copy lanes are shared, the bytes are not.
TYPED_TEST_P(DeviceTierTest, ConcurrentUseKeepsBlocksApart) {
  std::unique_ptr<DeviceTier> tier = this->Make(1024 * kSuiteKiB);
  ASSERT_NE(tier, nullptr);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<int> mismatches(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<std::byte> bytes = SuitePattern(8 * kSuiteKiB, static_cast<uint8_t>(t));
      std::vector<std::byte> out(bytes.size());
      for (int i = 0; i < 300; ++i) {
        Result<Extent> extent = tier->Allocate(bytes.size());
        if (!extent.ok()) continue;
        if (!tier->Write(*extent, bytes).ok() || !tier->Read(*extent, out).ok() || out != bytes) {
          ++mismatches[t];
        }
        tier->Free(*extent);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  EXPECT_EQ(tier->Stats().block_count, 0u);
}

REGISTER_TYPED_TEST_SUITE_P(DeviceTierTest, WriteReadRoundTrip,
                            NotHostAddressableButHasDevicePointers,
                            OversizedOrOutOfRangeCopiesAreInvalid, StatsFollowAllocations,
                            InvalidFreeIsCountedAndHarmless, BlocksLargerThanASlabSpanSlabs,
                            ConcurrentUseKeepsBlocksApart);

}  // namespace kvtier::tiers
