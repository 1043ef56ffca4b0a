#include "tiers/gpu/gpu_tier.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>

#include "common/cuda/ipc.h"
#include "common/cuda/ipc_test_util.h"
#include "common/cuda/probe.h"
#include "tests/fakes/child_process.h"
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

TEST(GpuTierTest, ZeroCapacityTakesAnEighthOfTheDeviceAtMostHalfTheFreeMemory) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  Result<std::unique_ptr<GpuTier>> tier = GpuTier::Create({});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  // Other processes may take or give back memory meanwhile: bounds, not an exact size.
  const uint64_t expected = std::min<uint64_t>(total_bytes / 8, free_bytes / 2);
  EXPECT_LE((*tier)->pool_bytes(), total_bytes / 8);
  EXPECT_GT((*tier)->pool_bytes(), expected / 2);
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

TEST(GpuTierTest, TheClientExportIsTheIpcHandle) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  Result<std::unique_ptr<GpuTier>> tier = GpuTier::Create({.capacity_bytes = 4 << 20});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Result<PoolExport> exported = (*tier)->ExportForClients();
  ASSERT_TRUE(exported.ok()) << exported.status().ToString();
  EXPECT_EQ(exported->kind, PoolExportKind::kCudaIpc);
  EXPECT_EQ(exported->pool_bytes, uint64_t{4} << 20);
  EXPECT_EQ(exported->device, 0);
  EXPECT_EQ(exported->fd, -1);
  EXPECT_EQ(exported->ipc_handle, *(*tier)->ExportIpc());
}

// What a client on the node will do: import the pool once and read a block at its extent's
// offset, in another process (common/cuda/ipc_child.cc checks the import holds the pattern and
// overwrites its second half).
TEST(GpuTierTest, AnotherProcessReadsThePoolThroughItsIpcHandle) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  constexpr uint64_t kPool = 4 << 20;
  constexpr uint8_t kSeed = 23;
  Result<std::unique_ptr<GpuTier>> tier = GpuTier::Create({.capacity_bytes = kPool});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Result<Extent> extent = (*tier)->Allocate(kPool);  // the whole pool, so the import matches it
  ASSERT_TRUE(extent.ok()) << extent.status().ToString();
  const std::vector<std::byte> pattern = cuda::testing::Pattern(kPool, kSeed);
  ASSERT_TRUE((*tier)->Write(*extent, pattern).ok());
  Result<std::string> handle = (*tier)->ExportIpc();
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();

  ::kvtier::testing::Child child = ::kvtier::testing::Spawn(
      {KVTIER_IPC_CHILD_PATH, "copy", cuda::testing::ToHex(*handle), std::to_string(kSeed)});
  ASSERT_GT(child.pid, 0);
  const int status = ::kvtier::testing::Wait(child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;

  std::vector<std::byte> now(kPool);
  ASSERT_TRUE((*tier)->Read(*extent, now).ok());
  EXPECT_TRUE(std::equal(now.begin(), now.begin() + kPool / 2, pattern.begin()));
  EXPECT_TRUE(std::all_of(now.begin() + kPool / 2, now.end(),
                          [](std::byte b) { return b == std::byte{0xAB}; }));
}

TEST(GpuTierTest, AMissingDeviceIsNotFound) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  EXPECT_EQ(GpuTier::Create({.device = 4096, .capacity_bytes = 4 << 20}).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvtier::tiers
