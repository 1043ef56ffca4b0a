#include "client/gpu/fake_device_copier.h"

#include <gtest/gtest.h>

#include <cstring>

#include "client/gpu/paged_test_util.h"

namespace kvtier::client::gpu {
namespace {

using testing::Bytes;
using testing::LayoutOver;
using testing::PagedShape;

// The shape the GPU benchmark uses, scaled down: 32 layers of K and V, 16-byte aligned slices.
constexpr PagedShape kShape{
    .planes = 64, .blocks = 4, .stride_bytes = 1024, .layer_block_bytes = 512};

TEST(FakeDeviceCopierTest, GatherAndScatterMatchTheReference) {
  std::vector<std::byte> memory = Bytes(kShape.total_bytes(), 7);
  const PagedKvLayout layout = LayoutOver(memory.data(), kShape);
  FakeDeviceCopier copier;
  std::vector<std::byte> gathered(layout.block_bytes()), expected(layout.block_bytes());
  ASSERT_TRUE(copier.Gather(layout, 2, gathered.data(), MemoryKind::kHost).ok());
  ASSERT_TRUE(copier.Synchronize().ok());
  ReferenceGather(layout, 2, expected.data());
  EXPECT_EQ(gathered, expected);

  const std::vector<std::byte> block = Bytes(layout.block_bytes(), 8);
  ASSERT_TRUE(copier.Scatter(block.data(), MemoryKind::kDevice, layout, 0).ok());
  ASSERT_TRUE(copier.Gather(layout, 0, gathered.data(), MemoryKind::kDevice).ok());
  ASSERT_TRUE(copier.Synchronize().ok());
  EXPECT_EQ(gathered, block);
  EXPECT_EQ(copier.counters().gathers, 2u);
  EXPECT_EQ(copier.counters().scatters, 1u);
}

TEST(FakeDeviceCopierTest, ABatchIsOneCallAndFailsWhole) {
  std::vector<std::byte> memory = Bytes(kShape.total_bytes(), 9);
  const PagedKvLayout layout = LayoutOver(memory.data(), kShape);
  FakeDeviceCopier copier;
  std::vector<std::byte> flat(3 * layout.block_bytes());
  std::vector<PagedBlockCopy> entries;
  for (uint64_t i = 0; i < 3; ++i) {
    entries.push_back({.block_id = 3 - i,
                       .contiguous = flat.data() + i * layout.block_bytes(),
                       .kind = i == 1 ? MemoryKind::kDevice : MemoryKind::kHost});
  }
  copier.FailNext(1);
  EXPECT_EQ(copier.GatherBlocks(layout, entries).code(), StatusCode::kDeviceError);
  EXPECT_EQ(flat, std::vector<std::byte>(flat.size())) << "a failed batch copied something";
  ASSERT_TRUE(copier.GatherBlocks(layout, entries).ok());
  ASSERT_TRUE(copier.Synchronize().ok());
  std::vector<std::byte> expected(layout.block_bytes());
  for (size_t i = 0; i < 3; ++i) {
    ReferenceGather(layout, entries[i].block_id, expected.data());
    EXPECT_EQ(0, std::memcmp(entries[i].contiguous, expected.data(), expected.size())) << i;
  }
  EXPECT_EQ(copier.counters().paged_batches, 1u);
  EXPECT_EQ(copier.counters().gathers, 3u);
  EXPECT_TRUE(copier.GatherBlocks(layout, {}).ok());
  EXPECT_EQ(copier.counters().paged_batches, 1u);
  entries[2].contiguous = nullptr;
  EXPECT_EQ(copier.ScatterBlocks(entries, layout).code(), StatusCode::kInvalidArgument);
}

TEST(FakeDeviceCopierTest, CopiesAndInjectedFailures) {
  FakeDeviceCopier copier;
  const std::vector<std::byte> src = Bytes(1000, 1);
  std::vector<std::byte> dst(1000);
  ASSERT_TRUE(copier.Copy(dst.data(), src.data(), src.size(), CopyDirection::kDeviceToHost).ok());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(copier.counters().bytes, 1000u);
  copier.FailNext(1);
  EXPECT_EQ(copier.Synchronize().code(), StatusCode::kDeviceError);
  EXPECT_TRUE(copier.Synchronize().ok());
  EXPECT_EQ(copier.Copy(nullptr, src.data(), 1, CopyDirection::kHostToDevice).code(),
            StatusCode::kInvalidArgument);
  PagedKvLayout bad;
  EXPECT_EQ(copier.Gather(bad, 0, dst.data(), MemoryKind::kHost).code(),
            StatusCode::kInvalidArgument);
}

TEST(MakeDeviceCopierTest, FakeOnRequestRealOrTheReasonOtherwise) {
  Result<std::unique_ptr<DeviceCopier>> fake = MakeDeviceCopier({.fake = true});
  ASSERT_TRUE(fake.ok());
  EXPECT_TRUE((*fake)->fake());
  Result<std::unique_ptr<DeviceCopier>> real = MakeDeviceCopier({});
  if (real.ok()) {
    EXPECT_FALSE((*real)->fake());
  } else {
    EXPECT_FALSE(real.status().message().empty());
  }
}

}  // namespace
}  // namespace kvtier::client::gpu
