#include "tiers/gpu/fake_gpu_tier.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

// What a client on the node does with the export: map the descriptor and read a block at its
// extent's offset; a write through the mapping is seen by the tier (the pages are shared).
TEST(FakeGpuTierTest, TheExportIsAMemfdOfThePool) {
  constexpr uint64_t kPool = 1 << 20;
  Result<std::unique_ptr<FakeGpuTier>> tier = FakeGpuTier::Create({.capacity_bytes = kPool});
  ASSERT_TRUE(tier.ok());
  Result<PoolExport> exported = (*tier)->ExportForClients();
  ASSERT_TRUE(exported.ok());
  EXPECT_EQ(exported->kind, PoolExportKind::kMemfd);
  EXPECT_EQ(exported->pool_bytes, kPool);
  EXPECT_EQ(exported->device, -1);
  EXPECT_TRUE(exported->ipc_handle.empty());
  struct stat st {};
  ASSERT_EQ(fstat(exported->fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kPool);
  EXPECT_EQ((*tier)->ExportForClients()->fd, exported->fd);  // one export for the tier's life
  // Sealed: a client holding the fd cannot shrink the pool under the daemon's mapping.
  EXPECT_NE(ftruncate(exported->fd, 0), 0);
  EXPECT_NE(ftruncate(exported->fd, static_cast<off_t>(kPool) * 2), 0);

  Result<Extent> first = (*tier)->Allocate(4096);
  Result<Extent> second = (*tier)->Allocate(4096);
  ASSERT_TRUE(first.ok() && second.ok());
  const std::vector<std::byte> bytes = SuitePattern(4096, 5);
  ASSERT_TRUE((*tier)->Write(*second, bytes).ok());
  void* mapped = mmap(nullptr, kPool, PROT_READ | PROT_WRITE, MAP_SHARED, exported->fd, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* base = static_cast<std::byte*>(mapped);
  EXPECT_NE(base, (*tier)->pool_base());
  EXPECT_EQ(std::memcmp(base + second->offset, bytes.data(), bytes.size()), 0);
  std::memset(base + first->offset, 0x7e, 4096);
  std::vector<std::byte> out(4096);
  ASSERT_TRUE((*tier)->Read(*first, out).ok());
  EXPECT_EQ(out, std::vector<std::byte>(4096, std::byte{0x7e}));
  munmap(mapped, kPool);
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
