#include "daemon/placement/gpu_promotion_policy.h"

#include <gtest/gtest.h>

namespace kvtier::placement {
namespace {

constexpr uint64_t kSecond = 1'000'000;

std::unique_ptr<GpuPromotionPolicy> Reads(uint32_t after_reads, uint64_t window_us) {
  auto policy = MakeGpuPromotionPolicy({"reads", after_reads, window_us});
  EXPECT_TRUE(policy.ok()) << policy.status().ToString();
  return std::move(policy).value();
}

TEST(GpuPromotionPolicyTest, ReadsWithinTheWindowQualifyOnTheNth) {
  auto policy = Reads(3, 10 * kSecond);
  EXPECT_EQ(policy->name(), "reads");
  index::BlockMeta meta;
  EXPECT_FALSE(policy->OnRead(meta, 100 * kSecond));
  EXPECT_FALSE(policy->OnRead(meta, 101 * kSecond));
  EXPECT_TRUE(policy->OnRead(meta, 109 * kSecond));
  // Later reads of the same window keep qualifying: a skipped candidate is offered again.
  EXPECT_TRUE(policy->OnRead(meta, 109 * kSecond + 1));
}

TEST(GpuPromotionPolicyTest, ReadsSpreadBeyondTheWindowNeverQualify) {
  auto policy = Reads(2, 10 * kSecond);
  index::BlockMeta meta;
  for (uint64_t t = 0; t < 10; ++t) {
    EXPECT_FALSE(policy->OnRead(meta, t * 11 * kSecond)) << "read " << t;
  }
  EXPECT_EQ(meta.window_reads, 1u);
}

TEST(GpuPromotionPolicyTest, OneReadIsEnoughWithAfterReadsOne) {
  auto policy = Reads(1, 1);
  index::BlockMeta meta;
  EXPECT_TRUE(policy->OnRead(meta, 5));
  EXPECT_TRUE(policy->OnRead(meta, 500));
}

TEST(GpuPromotionPolicyTest, AReadThatSeesAnEarlierClockCountsInTheCurrentWindow) {
  auto policy = Reads(2, 10 * kSecond);
  index::BlockMeta meta;
  EXPECT_FALSE(policy->OnRead(meta, 50 * kSecond));
  EXPECT_TRUE(policy->OnRead(meta, 50 * kSecond - 3));
}

TEST(GpuPromotionPolicyTest, TheCountSaturates) {
  auto policy = Reads(255, 1'000 * kSecond);
  index::BlockMeta meta;
  for (int i = 0; i < 254; ++i) ASSERT_FALSE(policy->OnRead(meta, kSecond));
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(policy->OnRead(meta, kSecond));
  EXPECT_EQ(meta.window_reads, 255u);
}

TEST(GpuPromotionPolicyTest, OffNeverPromotes) {
  auto policy = MakeGpuPromotionPolicy({"off", 1, 1});
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ((*policy)->name(), "off");
  index::BlockMeta meta;
  for (int i = 0; i < 10; ++i) EXPECT_FALSE((*policy)->OnRead(meta, 1));
}

TEST(GpuPromotionPolicyTest, BadOptionsNameTheirKey) {
  auto unknown = MakeGpuPromotionPolicy({"hot", 2, 1});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("gpu.promotion"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("known: reads, off"), std::string::npos);
  for (uint32_t n : {0u, 256u}) {
    auto bad = MakeGpuPromotionPolicy({"reads", n, 1});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("gpu.promote_after_reads"), std::string::npos);
  }
  auto no_window = MakeGpuPromotionPolicy({"reads", 2, 0});
  ASSERT_FALSE(no_window.ok());
  EXPECT_NE(no_window.status().message().find("gpu.promote_window_ms"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::placement
