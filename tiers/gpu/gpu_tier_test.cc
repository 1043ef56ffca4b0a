#include "tiers/gpu/gpu_tier.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "common/cuda/ipc.h"
#include "common/cuda/probe.h"
#include "tests/gpu/gpu_test_support.h"
#include "tiers/gpu/device_tier_test_suite.h"

namespace kvtier::tiers {
namespace {

struct CudaTraits {
  static Result<std::unique_ptr<DeviceTier>> Make(const GpuTierOptions& options) {
    Result<std::unique_ptr<GpuTier>> tier = GpuTier::Create(options);
    if (!tier.ok()) return tier.status();
    return std::unique_ptr<DeviceTier>(std::move(tier).value());
  }
  static bool Available(std::string* why) {
    const Status probe = cuda::ProbeDevice(0);
    *why = "needs a CUDA device: " + probe.ToString();
    return probe.ok();
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, DeviceTierTest, ::testing::Types<CudaTraits>);

TEST(GpuTierTest, BlocksLiveInDeviceMemory) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  Result<std::unique_ptr<GpuTier>> tier = GpuTier::Create({.capacity_bytes = 4 << 20});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Result<Extent> extent = (*tier)->Allocate(64 << 10);
  ASSERT_TRUE(extent.ok());
  const std::vector<std::byte> bytes = SuitePattern(64 << 10, 9);
  ASSERT_TRUE((*tier)->Write(*extent, bytes).ok());
  void* device_pointer = (*tier)->DevicePointer(*extent);
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, device_pointer), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attributes.device, 0);
  std::vector<std::byte> out(bytes.size());
  ASSERT_EQ(cudaMemcpy(out.data(), device_pointer, out.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(out, bytes);
}

TEST(GpuTierTest, ZeroCapacityTakesHalfTheFreeMemory) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  Result<std::unique_ptr<GpuTier>> tier = GpuTier::Create({});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_LE((*tier)->pool_bytes(), free_bytes / 2);
  EXPECT_GT((*tier)->pool_bytes(), free_bytes / 4);
}

TEST(GpuTierTest, ThePoolExportsOneIpcHandle) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  Result<std::unique_ptr<GpuTier>> tier = GpuTier::Create({.capacity_bytes = 4 << 20});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Result<std::string> first = (*tier)->ExportIpc();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->size(), cuda::kIpcHandleBytes);
  Result<std::string> second = (*tier)->ExportIpc();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, *second);
}

TEST(GpuTierTest, AMissingDeviceIsNotFound) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  EXPECT_EQ(GpuTier::Create({.device = 4096, .capacity_bytes = 4 << 20}).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvtier::tiers
