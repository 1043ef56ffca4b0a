#include "client/gpu/paged_copy_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "client/gpu/paged_copy_simulation.h"
#include "client/gpu/paged_test_util.h"

namespace kvtier::client::gpu {
namespace {

using testing::Bytes;
using testing::SimulateLaunch;

// One segment of `bytes` from src + src_offset to dst + dst_offset, `slices` thread blocks.
std::vector<std::byte> CopyOneSegment(uint64_t bytes, size_t src_offset, size_t dst_offset,
                                      uint32_t slices, const std::vector<std::byte>& src,
                                      std::vector<std::byte> dst) {
  PagedCopyArgs args{};
  args.plane_bases[0] =
      reinterpret_cast<unsigned char*>(const_cast<std::byte*>(src.data())) + src_offset;
  args.contiguous[0] = reinterpret_cast<unsigned char*>(dst.data()) + dst_offset;
  args.planes = 1;
  args.entries = 1;
  args.layer_block_bytes = bytes;
  args.gather = true;
  args.slices = slices;
  args.word_bytes = ChooseWordBytes(args);
  SimulateLaunch(args);
  return dst;
}

TEST(PagedCopyPlanTest, TheWordIsTheWidestThatDividesEveryAddressAndTheLength) {
  alignas(16) unsigned char memory[64];
  PagedCopyArgs args{};
  args.planes = 2;
  args.entries = 2;
  args.plane_bases[0] = memory;
  args.plane_bases[1] = memory + 32;
  args.contiguous[0] = memory + 16;
  args.contiguous[1] = memory + 48;
  args.block_offsets[1] = 4096;
  args.layer_block_bytes = 1024;
  EXPECT_EQ(ChooseWordBytes(args), 16u);
  args.block_offsets[1] = 4104;  // one address 8-aligned
  EXPECT_EQ(ChooseWordBytes(args), 8u);
  args.layer_block_bytes = 1020;
  EXPECT_EQ(ChooseWordBytes(args), 4u);
  args.contiguous[1] = memory + 50;  // 2-aligned: the fallback
  EXPECT_EQ(ChooseWordBytes(args), 1u);
  // Entries and planes past the counts do not matter.
  args.entries = 1;
  args.planes = 1;
  args.plane_bases[1] = memory + 1;
  EXPECT_EQ(ChooseWordBytes(args), 4u);  // 1020 bytes
}

TEST(PagedCopyPlanTest, SlicesFillTheGpuWithoutFlooringIt) {
  // One 2 MiB block of 64 planes: 2048 16-byte words per plane, 8 slices of 256 threads.
  EXPECT_EQ(PlanSlices(32 << 10, 16, 64), 8u);
  // 64 such blocks in one launch: 4096 segments, one thread block each.
  EXPECT_EQ(PlanSlices(32 << 10, 16, 64 * 64), 1u);
  // A huge segment alone is capped.
  EXPECT_EQ(PlanSlices(uint64_t{1} << 30, 16, 1), kKernelMaxSlices);
  // Tiny segments get one; the fallback counts 4-byte words.
  EXPECT_EQ(PlanSlices(3, 1, 5), 1u);
  EXPECT_EQ(PlanSlices(4096, 1, 1), 4u);
  EXPECT_EQ(PlanSlices(4096, 16, 1), 1u);
}

// The per-thread code against memcpy for every alignment of both ends and lengths around the
// word sizes: the aligned words, the funnel-shift fallback with each shift, the head and tail
// bytes, lengths under one word, and several slices.
TEST(PagedCopyPlanTest, EverySegmentShapeCopiesExactlyItsBytes) {
  const std::vector<std::byte> src = Bytes(4096 + 64, 5);
  const std::vector<std::byte> before = Bytes(4096 + 64, 6);
  for (uint64_t bytes : {1u, 2u, 3u, 4u, 5u, 7u, 15u, 16u, 17u, 31u, 64u, 100u, 1000u, 4095u}) {
    for (size_t src_offset = 0; src_offset < 8; ++src_offset) {
      for (size_t dst_offset = 0; dst_offset < 8; ++dst_offset) {
        for (uint32_t slices : {1u, 3u}) {
          std::vector<std::byte> expected = before;
          std::memcpy(expected.data() + dst_offset, src.data() + src_offset, bytes);
          ASSERT_EQ(CopyOneSegment(bytes, src_offset, dst_offset, slices, src, before), expected)
              << bytes << " bytes from +" << src_offset << " to +" << dst_offset << ", " << slices
              << " slices";
        }
      }
    }
  }
}

TEST(PagedCopyPlanTest, ManyWordsPerThreadTakeTheUnrolledLoop) {
  // 64 KiB with one slice: 16 words of 16 bytes per thread, four at a time, and a remainder.
  for (uint64_t bytes : {uint64_t{64} << 10, (uint64_t{64} << 10) + 48}) {
    const std::vector<std::byte> src = Bytes(bytes, 7);
    const std::vector<std::byte> copy =
        CopyOneSegment(bytes, 0, 0, 1, src, std::vector<std::byte>(bytes));
    EXPECT_EQ(copy, src) << bytes;
  }
}

}  // namespace
}  // namespace kvtier::client::gpu
