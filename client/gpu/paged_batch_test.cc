#include "client/gpu/paged_batch.h"

#include <gtest/gtest.h>

#include <vector>

#include "client/gpu/paged_copy_simulation.h"
#include "client/gpu/paged_test_util.h"

namespace kvtier::client::gpu {
namespace {

using testing::Bytes;
using testing::kPagedCopyCases;
using testing::LayoutOver;
using testing::PagedCase;
using testing::SimulatePagedBatch;

constexpr MemoryKind kHost = MemoryKind::kHost;
constexpr MemoryKind kDevice = MemoryKind::kDevice;

std::vector<PagedBlockCopy> Kinds(std::initializer_list<MemoryKind> kinds) {
  static std::byte somewhere[16];
  std::vector<PagedBlockCopy> entries;
  for (MemoryKind kind : kinds) entries.push_back({.contiguous = somewhere, .kind = kind});
  return entries;
}

TEST(PagedBatchTest, ValidationNamesTheBadEntry) {
  std::vector<std::byte> memory(1024);
  const PagedKvLayout layout = LayoutOver(
      memory.data(), {.planes = 2, .blocks = 4, .stride_bytes = 128, .layer_block_bytes = 100});
  std::vector<PagedBlockCopy> entries = Kinds({kHost, kDevice, kHost});
  EXPECT_TRUE(ValidatePagedBatch(layout, entries).ok());
  EXPECT_TRUE(ValidatePagedBatch(layout, {}).ok());
  entries[1].contiguous = nullptr;
  Status bad = ValidatePagedBatch(layout, entries);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("entry 1"), std::string::npos) << bad.ToString();
  entries[1].contiguous = memory.data();
  entries[2].block_id = uint64_t{1} << 60;  // * 128 bytes of stride: past 2^64
  bad = ValidatePagedBatch(layout, entries);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("entry 2"), std::string::npos) << bad.ToString();
  EXPECT_EQ(ValidatePagedBatch(PagedKvLayout{}, entries).code(), StatusCode::kInvalidArgument);
}

TEST(PagedBatchTest, ALaunchTakesAtMostTheKernelsBatchAndTheStagingsPlaces) {
  // Device entries only: full launches of kKernelMaxBatch, then the rest.
  const std::vector<PagedBlockCopy> device(kKernelMaxBatch + 6, {.kind = kDevice});
  PagedLaunchRange range = NextPagedLaunch(device, 0, 0);
  EXPECT_EQ(range.count, kKernelMaxBatch);
  EXPECT_EQ(range.staged, 0u);
  range = NextPagedLaunch(device, kKernelMaxBatch, 0);
  EXPECT_EQ(range.first, kKernelMaxBatch);
  EXPECT_EQ(range.count, 6u);
  // Two staging places: a launch ends before its third host entry; device ones ride along.
  const std::vector<PagedBlockCopy> mixed = Kinds({kHost, kDevice, kHost, kHost, kDevice});
  range = NextPagedLaunch(mixed, 0, 2);
  EXPECT_EQ(range.count, 3u);
  EXPECT_EQ(range.staged, 2u);
  range = NextPagedLaunch(mixed, 3, 2);
  EXPECT_EQ(range.count, 2u);
  EXPECT_EQ(range.staged, 1u);
  // No staging place asked for still makes progress, one host entry at a time.
  EXPECT_EQ(NextPagedLaunch(mixed, 0, 0).count, 2u);
}

TEST(PagedBatchTest, StagingHoldsTheHostEntriesThatFitAndAtLeastOne) {
  EXPECT_EQ(HostEntries(Kinds({kHost, kDevice, kHost})), 2u);
  EXPECT_EQ(StagingBlocks(0, 1 << 20, 64 << 20), 0u);
  EXPECT_EQ(StagingBlocks(10, 2 << 20, 64 << 20), 10u);
  EXPECT_EQ(StagingBlocks(100, 2 << 20, 64 << 20), 32u);
  EXPECT_EQ(StagingBlocks(100, 128 << 20, 64 << 20), 1u);
}

TEST(PagedBatchTest, ArgumentsPointHostEntriesAtTheirStagingPlaces) {
  alignas(16) std::byte memory[4096];
  alignas(16) std::byte device_buffer[512];
  alignas(16) std::byte staging[1024];
  const PagedKvLayout layout =
      LayoutOver(memory, {.planes = 2, .blocks = 8, .stride_bytes = 256, .layer_block_bytes = 128});
  std::vector<PagedBlockCopy> entries = Kinds({kHost, kDevice, kHost, kHost});
  entries[1].contiguous = device_buffer;
  for (size_t i = 0; i < entries.size(); ++i) entries[i].block_id = 7 - i;
  const PagedLaunchRange range = NextPagedLaunch(entries, 1, 4);
  ASSERT_EQ(range.count, 3u);
  PagedCopyArgs args;
  FillPagedCopyArgs(layout, entries, range, staging, /*gather=*/true, args);
  EXPECT_EQ(args.planes, 2u);
  EXPECT_EQ(args.entries, 3u);
  EXPECT_EQ(args.plane_bases[1], reinterpret_cast<unsigned char*>(memory) + 8 * 256);
  EXPECT_EQ(args.block_offsets[0], 6u * 256);
  EXPECT_EQ(args.contiguous[0], reinterpret_cast<unsigned char*>(device_buffer));
  EXPECT_EQ(args.contiguous[1], reinterpret_cast<unsigned char*>(staging));
  EXPECT_EQ(args.contiguous[2], reinterpret_cast<unsigned char*>(staging) + 256);
  EXPECT_EQ(args.word_bytes, 16u);
  EXPECT_TRUE(args.gather);
  EXPECT_GE(args.slices, 1u);
}

// The CUDA copier's batch path, replayed on the CPU (paged_copy_simulation.h), against the
// reference, for every shape of kPagedCopyCases: a batch of every block in a scattered order,
// host and device entries alternating, once with staging for all of it and once with two places.
class SimulatedPagedBatchTest : public ::testing::TestWithParam<PagedCase> {
 protected:
  // Memory readable up to 16 bytes past every range, as the kernel's fallback may read.
  static std::vector<std::byte> Padded(size_t bytes, uint32_t seed) {
    return Bytes(bytes + 32, seed);
  }
};

TEST_P(SimulatedPagedBatchTest, GatherAndScatterMatchTheReference) {
  const PagedCase& c = GetParam();
  for (uint64_t max_staging : {uint64_t{1} << 30, uint64_t{2}}) {
    std::vector<std::byte> cache = Padded(c.base_offset + c.shape.total_bytes(), 3);
    const PagedKvLayout layout = LayoutOver(cache.data() + c.base_offset, c.shape);
    const uint64_t block_bytes = layout.block_bytes();
    std::vector<std::vector<std::byte>> flats;
    std::vector<PagedBlockCopy> entries;
    for (uint64_t i = 0; i < c.shape.blocks; ++i) {
      flats.push_back(Padded(c.flat_offset + block_bytes, 10 + i));
      entries.push_back({.block_id = c.shape.blocks - 1 - i,
                         .contiguous = flats.back().data() + c.flat_offset,
                         .kind = i % 2 == 0 ? kHost : kDevice});
    }
    const std::vector<std::vector<std::byte>> sources = flats;
    SimulatePagedBatch(layout, entries, /*gather=*/true, max_staging);
    std::vector<std::byte> expected(block_bytes);
    for (size_t i = 0; i < entries.size(); ++i) {
      ReferenceGather(layout, entries[i].block_id, expected.data());
      ASSERT_EQ(0, std::memcmp(entries[i].contiguous, expected.data(), block_bytes))
          << "gathered entry " << i << ", staging " << max_staging;
    }
    // Scatter the original contiguous bytes back; every byte of the cache, padding and other
    // blocks included, must equal the reference's.
    std::vector<std::byte> mirror = cache;
    const PagedKvLayout mirror_layout = LayoutOver(mirror.data() + c.base_offset, c.shape);
    for (size_t i = 0; i < entries.size(); ++i) {
      std::memcpy(entries[i].contiguous, sources[i].data() + c.flat_offset, block_bytes);
      ReferenceScatter(sources[i].data() + c.flat_offset, mirror_layout, entries[i].block_id);
    }
    SimulatePagedBatch(layout, entries, /*gather=*/false, max_staging);
    ASSERT_EQ(cache, mirror) << "scatter, staging " << max_staging;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SimulatedPagedBatchTest, ::testing::ValuesIn(kPagedCopyCases),
                         [](const ::testing::TestParamInfo<PagedCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(SimulatedPagedBatchTest, ABatchLargerThanOneLaunchIsCutAndCopiedWhole) {
  const testing::PagedShape shape{
      .planes = 2, .blocks = 150, .stride_bytes = 48, .layer_block_bytes = 32};
  std::vector<std::byte> cache = Bytes(shape.total_bytes() + 16, 4);
  const PagedKvLayout layout = LayoutOver(cache.data(), shape);
  std::vector<std::byte> flat(shape.blocks * layout.block_bytes() + 16);
  std::vector<PagedBlockCopy> entries;
  for (uint64_t i = 0; i < shape.blocks; ++i) {
    entries.push_back({.block_id = shape.blocks - 1 - i,
                       .contiguous = flat.data() + i * layout.block_bytes(),
                       .kind = i % 3 == 0 ? kHost : kDevice});
  }
  // 50 host entries, 10 staging places: launches end at every 10th host entry.
  const testing::SimulatedBatch batch =
      SimulatePagedBatch(layout, entries, /*gather=*/true, 10 * layout.block_bytes());
  EXPECT_EQ(batch.launches.size(), 5u);
  for (const PagedCopyArgs& args : batch.launches) EXPECT_LE(args.entries, kKernelMaxBatch);
  EXPECT_EQ(SimulatePagedBatch(layout, entries, true, uint64_t{1} << 30).launches.size(), 3u);
  std::vector<std::byte> expected(layout.block_bytes());
  for (size_t i = 0; i < entries.size(); ++i) {
    ReferenceGather(layout, entries[i].block_id, expected.data());
    ASSERT_EQ(0, std::memcmp(entries[i].contiguous, expected.data(), expected.size())) << i;
  }
}

}  // namespace
}  // namespace kvtier::client::gpu
