#include "client/gpu/paged_layout.h"

#include <gtest/gtest.h>

#include <cstring>

#include "client/gpu/paged_test_util.h"

namespace kvtier::client::gpu {
namespace {

using testing::Bytes;
using testing::LayoutOver;
using testing::PagedShape;

// 6 planes of 5 blocks, 100 bytes of each block used out of a 128-byte stride (padding).
constexpr PagedShape kShape{
    .planes = 6, .blocks = 5, .stride_bytes = 128, .layer_block_bytes = 100};

TEST(PagedLayoutTest, GatherTakesEachPlanesSliceInOrder) {
  std::vector<std::byte> memory = Bytes(kShape.total_bytes(), 1);
  const PagedKvLayout layout = LayoutOver(memory.data(), kShape);
  ASSERT_TRUE(ValidatePagedLayout(layout).ok());
  EXPECT_EQ(layout.block_bytes(), 600u);
  std::vector<std::byte> block(layout.block_bytes());
  ReferenceGather(layout, 3, block.data());
  for (size_t p = 0; p < kShape.planes; ++p) {
    const std::byte* expected = memory.data() + (p * kShape.blocks + 3) * kShape.stride_bytes;
    EXPECT_EQ(std::memcmp(block.data() + p * 100, expected, 100), 0) << "plane " << p;
  }
}

TEST(PagedLayoutTest, ScatterWritesOnlyTheBlocksSlices) {
  std::vector<std::byte> memory = Bytes(kShape.total_bytes(), 2);
  const std::vector<std::byte> before = memory;
  const PagedKvLayout layout = LayoutOver(memory.data(), kShape);
  const std::vector<std::byte> block = Bytes(layout.block_bytes(), 3);
  ReferenceScatter(block.data(), layout, 1);
  std::vector<std::byte> back(block.size());
  ReferenceGather(layout, 1, back.data());
  EXPECT_EQ(back, block);
  // Everything outside block 1's 100-byte slices, padding included, is untouched.
  for (size_t i = 0; i < memory.size(); ++i) {
    const size_t in_plane = i % (kShape.blocks * kShape.stride_bytes);
    const bool in_block =
        in_plane / kShape.stride_bytes == 1 && in_plane % kShape.stride_bytes < 100;
    if (!in_block) {
      ASSERT_EQ(memory[i], before[i]) << "byte " << i;
    }
  }
}

TEST(PagedLayoutTest, BadLayoutsAreNamed) {
  std::vector<std::byte> memory(kShape.total_bytes());
  PagedKvLayout layout = LayoutOver(memory.data(), kShape);
  layout.layer_block_bytes = 129;
  EXPECT_EQ(ValidatePagedLayout(layout).code(), StatusCode::kInvalidArgument);
  layout.layer_block_bytes = 0;
  EXPECT_EQ(ValidatePagedLayout(layout).code(), StatusCode::kInvalidArgument);
  layout = LayoutOver(memory.data(), kShape);
  layout.plane_bases[2] = nullptr;
  EXPECT_NE(ValidatePagedLayout(layout).message().find("plane 2"), std::string::npos);
  layout.plane_bases.clear();
  EXPECT_EQ(ValidatePagedLayout(layout).code(), StatusCode::kInvalidArgument);
  layout.plane_bases.assign(kMaxPagedPlanes + 1, memory.data());
  layout.block_stride_bytes = layout.layer_block_bytes = 1;
  EXPECT_EQ(ValidatePagedLayout(layout).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::client::gpu
