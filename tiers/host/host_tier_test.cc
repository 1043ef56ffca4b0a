#include "tiers/host/host_tier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace kvtier::tiers {
namespace {

constexpr uint64_t kKiB = 1024;

std::unique_ptr<HostTier> MakeTier(uint64_t capacity, uint64_t slab = 64 * kKiB,
                                   TierId id = TierId::kHost) {
  HostTier::Options options;
  options.capacity_bytes = capacity;
  options.slab_bytes = slab;
  options.try_mlock = false;
  Result<std::unique_ptr<HostTier>> tier = HostTier::Create(options, id);
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

std::vector<std::byte> Pattern(size_t size, uint8_t seed) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = std::byte(static_cast<uint8_t>(seed + i * 7));
  return bytes;
}

TEST(HostTierTest, WriteReadRoundTrip) {
  std::unique_ptr<HostTier> tier = MakeTier(256 * kKiB);
  ASSERT_NE(tier, nullptr);
  Result<Extent> a = tier->Allocate(10000);
  Result<Extent> b = tier->Allocate(10000);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<std::byte> pa = Pattern(10000, 1), pb = Pattern(10000, 2);
  ASSERT_TRUE(tier->Write(*a, pa).ok());
  ASSERT_TRUE(tier->Write(*b, pb).ok());
  std::vector<std::byte> out(10000);
  ASSERT_TRUE(tier->Read(*a, out).ok());
  EXPECT_EQ(out, pa);
  ASSERT_TRUE(tier->Read(*b, out).ok());
  EXPECT_EQ(out, pb);
  // A prefix read and a short write touch only the start of the extent.
  std::vector<std::byte> head(100);
  ASSERT_TRUE(tier->Read(*a, head).ok());
  EXPECT_TRUE(std::equal(head.begin(), head.end(), pa.begin()));
}

TEST(HostTierTest, AddressIsTheArenaBytes) {
  std::unique_ptr<HostTier> tier = MakeTier(256 * kKiB);
  ASSERT_NE(tier, nullptr);
  Result<Extent> extent = tier->Allocate(4096);
  ASSERT_TRUE(extent.ok());
  std::byte* address = tier->Address(*extent);
  EXPECT_EQ(address, tier->arena().base() + extent->offset);
  const std::vector<std::byte> bytes = Pattern(4096, 9);
  ASSERT_TRUE(tier->Write(*extent, bytes).ok());
  EXPECT_EQ(std::memcmp(address, bytes.data(), bytes.size()), 0);
  EXPECT_EQ(tier->Address({256 * kKiB, 1}), nullptr);
}

TEST(HostTierTest, OversizedOrOutOfRangeCopiesAreInvalid) {
  std::unique_ptr<HostTier> tier = MakeTier(256 * kKiB);
  ASSERT_NE(tier, nullptr);
  Result<Extent> extent = tier->Allocate(100);
  ASSERT_TRUE(extent.ok());
  std::vector<std::byte> big(101);
  EXPECT_EQ(tier->Write(*extent, big).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Read(*extent, big).code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> small(10);
  EXPECT_EQ(tier->Write({256 * kKiB - 4, 10}, small).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Read({UINT64_MAX - 4, 10}, small).code(), StatusCode::kInvalidArgument);
}

TEST(HostTierTest, StatsFollowAllocations) {
  std::unique_ptr<HostTier> tier = MakeTier(256 * kKiB);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->id(), TierId::kHost);
  std::vector<Extent> extents;
  for (int i = 0; i < 16; ++i) {
    Result<Extent> extent = tier->Allocate(16 * kKiB);
    ASSERT_TRUE(extent.ok());
    extents.push_back(*extent);
  }
  TierStats stats = tier->Stats();
  EXPECT_EQ(stats.capacity_bytes, 256 * kKiB);
  EXPECT_EQ(stats.used_bytes, 256 * kKiB);
  EXPECT_EQ(stats.reserved_bytes, 256 * kKiB);
  EXPECT_EQ(stats.block_count, 16u);
  EXPECT_DOUBLE_EQ(stats.fragmentation, 0.0);
  EXPECT_EQ(tier->Allocate(16 * kKiB).status().code(), StatusCode::kBusy);
  EXPECT_EQ(tier->Allocate(257 * kKiB).status().code(), StatusCode::kRejected);
  EXPECT_EQ(tier->Allocate(0).status().code(), StatusCode::kInvalidArgument);
  for (const Extent& extent : extents) tier->Free(extent);
  stats = tier->Stats();
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_EQ(stats.reserved_bytes, 0u);
  EXPECT_EQ(stats.block_count, 0u);
  EXPECT_EQ(tier->invalid_free_count(), 0u);
}

TEST(HostTierTest, InvalidFreeIsCountedAndHarmless) {
  std::unique_ptr<HostTier> tier = MakeTier(256 * kKiB);
  ASSERT_NE(tier, nullptr);
  Result<Extent> extent = tier->Allocate(4096);
  ASSERT_TRUE(extent.ok());
  tier->Free(*extent);
  tier->Free(*extent);
  tier->Free({12 * kKiB, 4096});
  EXPECT_EQ(tier->invalid_free_count(), 2u);
  EXPECT_EQ(tier->Stats().block_count, 0u);
}

TEST(HostTierTest, OtherTierIdGivesAMemoryBackedStandIn) {
  std::unique_ptr<HostTier> tier = MakeTier(128 * kKiB, 64 * kKiB, TierId::kGpu);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->id(), TierId::kGpu);
  Result<Extent> extent = tier->Allocate(1000);
  ASSERT_TRUE(extent.ok());
  EXPECT_NE(tier->Address(*extent), nullptr);
}

TEST(HostTierTest, BadOptionsAreRejectedBeforeMapping) {
  HostTier::Options options;
  options.capacity_bytes = 256 * kKiB;
  options.alignment = 3000;
  EXPECT_EQ(HostTier::Create(options).status().code(), StatusCode::kInvalidArgument);
  options.alignment = 4096;
  options.capacity_bytes = 0;
  EXPECT_EQ(HostTier::Create(options).status().code(), StatusCode::kInvalidArgument);
}

// Several threads allocating, writing, reading back and freeing their own blocks: the allocator
// is shared, the bytes are not. A smoke test for the mutex (run under TSan in CI).
TEST(HostTierTest, ConcurrentUseKeepsBlocksApart) {
  std::unique_ptr<HostTier> tier = MakeTier(1024 * kKiB);
  ASSERT_NE(tier, nullptr);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<int> mismatches(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<std::byte> bytes = Pattern(8 * kKiB, static_cast<uint8_t>(t));
      std::vector<std::byte> out(bytes.size());
      for (int i = 0; i < 2000; ++i) {
        Result<Extent> extent = tier->Allocate(bytes.size());
        if (!extent.ok()) continue;
        if (!tier->Write(*extent, bytes).ok() || !tier->Read(*extent, out).ok() || out != bytes) {
          ++mismatches[t];
        }
        tier->Free(*extent);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  EXPECT_EQ(tier->Stats().block_count, 0u);
  EXPECT_EQ(tier->invalid_free_count(), 0u);
}

}  // namespace
}  // namespace kvtier::tiers
