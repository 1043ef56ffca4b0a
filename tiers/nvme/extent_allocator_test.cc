#include "tiers/nvme/extent_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <vector>

#include "tiers/nvme/nvme_format.h"

namespace kvtier::tiers::nvme {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(ExtentAllocatorTest, FillsTheRegionWithExactFootprints) {
  uint64_t fp = ExtentFootprint(2 * kMiB);
  ExtentAllocator a(10 * fp);
  std::vector<Extent> got;
  for (int i = 0; i < 10; ++i) {
    auto e = a.Allocate(2 * kMiB);
    ASSERT_TRUE(e.ok()) << i;
    EXPECT_EQ(e->offset, i * fp);
    EXPECT_EQ(e->length, 2 * kMiB);
    got.push_back(*e);
  }
  EXPECT_EQ(a.Allocate(2 * kMiB).status().code(), StatusCode::kBusy);
  TierStats s = a.Stats();
  EXPECT_EQ(s.used_bytes, 20 * kMiB);
  EXPECT_EQ(s.reserved_bytes, 10 * fp);
  EXPECT_EQ(s.block_count, 10u);
  EXPECT_EQ(a.free_bytes(), 0u);
  ASSERT_TRUE(a.Free(got[3]).ok());
  auto again = a.Allocate(2 * kMiB);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->offset, got[3].offset);  // the freed hole is reused exactly
}

TEST(ExtentAllocatorTest, RejectsWhatCanNeverFitAndZero) {
  ExtentAllocator a(8 * kMiB);
  EXPECT_EQ(a.Allocate(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Allocate(8 * kMiB).status().code(), StatusCode::kRejected);
  EXPECT_TRUE(a.Allocate(8 * kMiB - kRecordHeaderBytes).ok());
}

TEST(ExtentAllocatorTest, NeighboursCoalesceForALargerBlock) {
  ExtentAllocator a(4 * ExtentFootprint(kMiB));
  std::vector<Extent> e;
  for (int i = 0; i < 4; ++i) e.push_back(*a.Allocate(kMiB));
  ASSERT_TRUE(a.Free(e[1]).ok());
  ASSERT_TRUE(a.Free(e[2]).ok());
  EXPECT_EQ(a.largest_free_bytes(), 2 * ExtentFootprint(kMiB));
  auto big = a.Allocate(2 * kMiB);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->offset, e[1].offset);
}

TEST(ExtentAllocatorTest, BadFreesChangeNothing) {
  ExtentAllocator a(16 * kMiB);
  Extent e = *a.Allocate(kMiB);
  EXPECT_EQ(a.Free({e.offset, e.length + 1}).code(), StatusCode::kInternal);
  EXPECT_EQ(a.Free({e.offset + 4096, e.length}).code(), StatusCode::kInternal);
  ASSERT_TRUE(a.Free(e).ok());
  EXPECT_EQ(a.Free(e).code(), StatusCode::kInternal);
  EXPECT_EQ(a.Stats().block_count, 0u);
  EXPECT_EQ(a.largest_free_bytes(), 16 * kMiB);
}

TEST(ExtentAllocatorTest, ClaimTakesRecoveredExtentsAndRefusesOverlaps) {
  ExtentAllocator a(32 * kMiB);
  ASSERT_TRUE(a.Claim({8 * kMiB, kMiB}).ok());
  EXPECT_EQ(a.Claim({8 * kMiB, kMiB}).code(), StatusCode::kCorruption);
  EXPECT_EQ(a.Claim({8 * kMiB + 4096, 10}).code(), StatusCode::kCorruption);
  EXPECT_EQ(a.Claim({8 * kMiB - 4096, 10}).code(), StatusCode::kCorruption);
  EXPECT_EQ(a.Claim({31 * kMiB, 2 * kMiB}).code(), StatusCode::kCorruption);
  EXPECT_EQ(a.Claim({4097, 10}).code(), StatusCode::kCorruption);
  EXPECT_EQ(a.Claim({~uint64_t{0} - 4095, 10}).code(), StatusCode::kCorruption);
  ASSERT_TRUE(a.Claim({0, 4096}).ok());
  EXPECT_EQ(a.Stats().block_count, 2u);
  auto next = a.Allocate(kMiB);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->offset, 2 * 4096u);
  ASSERT_TRUE(a.Free({8 * kMiB, kMiB}).ok());
}

// Random allocate/free of mixed sizes; the accounting must match a shadow model exactly and every
// extent must stay disjoint.
TEST(ExtentAllocatorTest, RandomChurnKeepsExactAccounting) {
  ExtentAllocator a(256 * kMiB);
  std::mt19937_64 rng(11);
  std::vector<Extent> live;
  uint64_t used = 0, reserved = 0;
  const uint64_t sizes[] = {512 * 1024, 2 * kMiB, 2 * kMiB + 100, 5 * kMiB};
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 2 == 0) {
      uint64_t bytes = sizes[rng() % 4];
      auto e = a.Allocate(bytes);
      if (!e.ok()) {
        ASSERT_EQ(e.status().code(), StatusCode::kBusy);
        continue;
      }
      live.push_back(*e);
      used += bytes;
      reserved += ExtentFootprint(bytes);
    } else {
      size_t i = rng() % live.size();
      ASSERT_TRUE(a.Free(live[i]).ok());
      used -= live[i].length;
      reserved -= ExtentFootprint(live[i].length);
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_EQ(a.Stats().used_bytes, used);
    ASSERT_EQ(a.Stats().reserved_bytes, reserved);
  }
  std::sort(live.begin(), live.end(), [](auto& x, auto& y) { return x.offset < y.offset; });
  for (size_t i = 1; i < live.size(); ++i) {
    ASSERT_LE(live[i - 1].offset + ExtentFootprint(live[i - 1].length), live[i].offset);
  }
  for (const Extent& e : live) ASSERT_TRUE(a.Free(e).ok());
  EXPECT_EQ(a.largest_free_bytes(), 256 * kMiB);  // everything coalesced back into one hole
}

// RoomAround: the range whose extents, once freed, leave one hole a larger block fits, and Allocate
// then places the block there.
TEST(ExtentAllocatorTest, RoomAroundAVictimIsOneHoleOnceItsExtentsAreFreed) {
  const uint64_t small = ExtentFootprint(4096);     // 8 KiB
  const uint64_t big = ExtentFootprint(64 * 1024);  // 68 KiB: 8.5 small extents
  ExtentAllocator a(64 * small);
  std::vector<Extent> extents;
  for (int i = 0; i < 64; ++i) extents.push_back(*a.Allocate(4096));
  // Every other extent freed: 32 holes of 8 KiB, none large enough.
  for (int i = 0; i < 64; i += 2) ASSERT_TRUE(a.Free(extents[i]).ok());
  EXPECT_EQ(a.Allocate(64 * 1024).status().code(), StatusCode::kBusy);
  // From extent 21: the hole of extent 20 before it is used too.
  std::optional<Extent> room = a.RoomAround(extents[21].offset, 64 * 1024);
  ASSERT_TRUE(room.has_value());
  EXPECT_EQ(*room, (Extent{extents[20].offset, big}));
  // Freeing every live extent that starts inside it makes the hole.
  for (const Extent& e : extents) {
    if (a.IsLive(e) && e.offset >= room->offset && e.offset < room->offset + room->length) {
      ASSERT_TRUE(a.Free(e).ok());
    }
  }
  Result<Extent> placed = a.Allocate(64 * 1024);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->offset, room->offset);
  // A victim too near the end of its segment has no room after it.
  EXPECT_FALSE(a.RoomAround(extents[63].offset, 64 * 1024).has_value());
  EXPECT_FALSE(a.RoomAround(64 * small, 4096).has_value());  // outside the region
}

// With several segments the room stays in the victim's: a hole that ends at a segment boundary
// belongs to the segment before it.
TEST(ExtentAllocatorTest, RoomAroundStaysInTheVictimsSegment) {
  const uint64_t small = ExtentFootprint(4096);
  ExtentAllocator a(8 * small, /*segments=*/2);
  std::vector<Extent> extents;
  for (int i = 0; i < 16; ++i) extents.push_back(*a.Allocate(4096));
  std::sort(extents.begin(), extents.end(),
            [](const Extent& x, const Extent& y) { return x.offset < y.offset; });
  ASSERT_TRUE(a.Free(extents[7]).ok());  // the last of segment 0
  std::optional<Extent> room = a.RoomAround(extents[8].offset, 2 * 4096);
  ASSERT_TRUE(room.has_value());
  EXPECT_EQ(room->offset, 8 * small);  // not the hole at 7 * small
}

TEST(ExtentAllocatorTest, SegmentsTakeTurnsAndNeverShareAnExtent) {
  uint64_t fp = ExtentFootprint(kMiB);
  ExtentAllocator a(4 * fp, 3);  // three data files of four blocks each
  EXPECT_EQ(a.Stats().capacity_bytes, 12 * fp);
  std::vector<Extent> e;
  for (int i = 0; i < 12; ++i) {
    auto got = a.Allocate(kMiB);
    ASSERT_TRUE(got.ok()) << i;
    EXPECT_EQ(a.Segment(got->offset), static_cast<uint32_t>(i % 3)) << i;  // round robin
    e.push_back(*got);
  }
  EXPECT_EQ(a.Allocate(kMiB).status().code(), StatusCode::kBusy);
  EXPECT_EQ(a.Allocate(5 * fp).status().code(), StatusCode::kRejected);  // larger than a file
  for (const Extent& x : e) ASSERT_TRUE(a.Free(x).ok());
  // Everything is free again, but holes do not merge across files: at most one file's worth.
  EXPECT_EQ(a.largest_free_bytes(), 4 * fp);
  EXPECT_EQ(a.Claim({4 * fp - 4096, 4096}).code(), StatusCode::kCorruption);  // straddles
  EXPECT_TRUE(a.Claim({4 * fp, 4096}).ok());
}

}  // namespace
}  // namespace kvtier::tiers::nvme
