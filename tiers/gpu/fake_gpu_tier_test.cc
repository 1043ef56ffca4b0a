#include "tiers/gpu/fake_gpu_tier.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tiers/gpu/device_tier_test_suite.h"

namespace kvtier::tiers {
namespace {

struct FakeTraits {
  static Result<std::unique_ptr<DeviceTier>> Make(const GpuTierOptions& options) {
    Result<std::unique_ptr<FakeGpuTier>> tier = FakeGpuTier::Create(options);
    if (!tier.ok()) return tier.status();
    return std::unique_ptr<DeviceTier>(std::move(tier).value());
  }
  static bool Available(std::string*) { return true; }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Fake, DeviceTierTest, ::testing::Types<FakeTraits>);

TEST(FakeGpuTierTest, DevicePointerIsTheHostCopyOfTheBlock) {
  Result<std::unique_ptr<FakeGpuTier>> tier = FakeGpuTier::Create({.capacity_bytes = 1 << 20});
  ASSERT_TRUE(tier.ok());
  Result<Extent> extent = (*tier)->Allocate(4096);
  ASSERT_TRUE(extent.ok());
  const std::vector<std::byte> bytes = SuitePattern(4096, 3);
  ASSERT_TRUE((*tier)->Write(*extent, bytes).ok());
  EXPECT_EQ(std::memcmp((*tier)->DevicePointer(*extent), bytes.data(), bytes.size()), 0);
  EXPECT_EQ((*tier)->device(), -1);
}

TEST(FakeGpuTierTest, InjectedFailuresAreDeviceErrorsAndCopyNothing) {
  Result<std::unique_ptr<FakeGpuTier>> tier = FakeGpuTier::Create({.capacity_bytes = 1 << 20});
  ASSERT_TRUE(tier.ok());
  Result<Extent> extent = (*tier)->Allocate(4096);
  ASSERT_TRUE(extent.ok());
  const std::vector<std::byte> first = SuitePattern(4096, 1), second = SuitePattern(4096, 2);
  ASSERT_TRUE((*tier)->Write(*extent, first).ok());
  (*tier)->FailNextCopies(2);
  EXPECT_EQ((*tier)->Write(*extent, second).code(), StatusCode::kDeviceError);
  std::vector<std::byte> out(4096);
  EXPECT_EQ((*tier)->Read(*extent, out).code(), StatusCode::kDeviceError);
  ASSERT_TRUE((*tier)->Read(*extent, out).ok());
  EXPECT_EQ(out, first);
}

TEST(FakeGpuTierTest, NeedsACapacity) {
  EXPECT_EQ(FakeGpuTier::Create({}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FakeGpuTier::Create({.capacity_bytes = 1 << 20, .alignment = 3000}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::tiers
