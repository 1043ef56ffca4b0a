#include "tiers/gpu/gpu_tier_factory.h"

#include <gtest/gtest.h>

#include "common/cuda/probe.h"
#include "tiers/gpu/fake_gpu_tier.h"

namespace kvtier::tiers {
namespace {

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

TEST(MakeGpuTierTest, DisabledInConfigSaysSo) {
  Result<std::unique_ptr<DeviceTier>> tier = MakeGpuTier({.enabled = false, .fake = true});
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kRejected);
  EXPECT_EQ(tier.status().message(), "no GPU tier: disabled in config");
}

TEST(MakeGpuTierTest, FakeWhenAskedInEveryBuild) {
  Result<std::unique_ptr<DeviceTier>> tier = MakeGpuTier({.fake = true, .capacity_bytes = 1 << 20});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_NE(dynamic_cast<FakeGpuTier*>(tier->get()), nullptr);
  EXPECT_EQ((*tier)->id(), TierId::kGpu);
}

TEST(MakeGpuTierTest, BadFakeOptionsArePrefixed) {
  Result<std::unique_ptr<DeviceTier>> tier = MakeGpuTier({.fake = true});
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(StartsWith(tier.status().message(), "no GPU tier: ")) << tier.status().message();
}

// The real tier or the reason there is none, whichever this machine and build give.
TEST(MakeGpuTierTest, RealTierOrTheReasonWhyNot) {
  const Status probe = cuda::ProbeDevice(0);
  Result<std::unique_ptr<DeviceTier>> tier = MakeGpuTier({.capacity_bytes = 4 << 20});
  if (probe.ok()) {
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    EXPECT_EQ((*tier)->device(), 0);
    EXPECT_EQ(dynamic_cast<FakeGpuTier*>(tier->get()), nullptr);
    return;
  }
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), probe.code());
  EXPECT_EQ(tier.status().message(), "no GPU tier: " + probe.message());
  if (!cuda::BuiltWithCuda()) {
    EXPECT_EQ(tier.status().message(), "no GPU tier: built without CUDA (KVTIER_WITH_CUDA=OFF)");
  } else {
    EXPECT_TRUE(StartsWith(tier.status().message(), "no GPU tier: no CUDA device found"))
        << tier.status().message();
  }
}

TEST(MakeGpuTierTest, AMissingDeviceOrdinalIsNamed) {
  Result<std::unique_ptr<DeviceTier>> tier =
      MakeGpuTier({.device = 4096, .capacity_bytes = 1 << 20});
  ASSERT_FALSE(tier.ok());
  EXPECT_TRUE(StartsWith(tier.status().message(), "no GPU tier: ")) << tier.status().message();
}

}  // namespace
}  // namespace kvtier::tiers
