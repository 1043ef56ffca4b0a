#include "tiers/slab_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace kvtier::tiers {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

SlabAllocator MakeAllocator(uint64_t capacity, uint64_t slab, uint64_t alignment = 4 * kKiB) {
  Result<SlabAllocator> allocator = SlabAllocator::Create(
      {.capacity_bytes = capacity, .slab_bytes = slab, .alignment = alignment});
  EXPECT_TRUE(allocator.ok()) << allocator.status().ToString();
  return std::move(allocator).value();
}

Extent MustAllocate(SlabAllocator& allocator, uint64_t bytes) {
  Result<Extent> extent = allocator.Allocate(bytes);
  EXPECT_TRUE(extent.ok()) << extent.status().ToString();
  return extent.ok() ? *extent : Extent{};
}

// The live extents, and from them everything the allocator's answers must agree with: no overlap,
// alignment, exact stats, and whether a request that came back kBusy really had no room.
class ReferenceModel {
 public:
  explicit ReferenceModel(const SlabAllocator& allocator)
      : capacity_(allocator.capacity_bytes()),
        slab_(allocator.slab_bytes()),
        alignment_(allocator.alignment()),
        slab_count_(allocator.slab_count()) {}

  void Add(const Extent& extent, uint64_t requested) {
    ASSERT_EQ(extent.length, requested);
    ASSERT_EQ(extent.offset % alignment_, 0u);
    ASSERT_LE(extent.offset + extent.length, capacity_);
    auto next = live_.lower_bound(extent.offset);
    if (next != live_.end()) {
      ASSERT_LE(extent.offset + extent.length, next->first);
    }
    if (next != live_.begin()) {
      auto prev = std::prev(next);
      ASSERT_LE(prev->first + prev->second, extent.offset);
    }
    live_[extent.offset] = extent.length;
  }

  void Remove(const Extent& extent) { live_.erase(extent.offset); }
  bool Contains(const Extent& extent) const {
    auto it = live_.find(extent.offset);
    return it != live_.end() && it->second == extent.length;
  }
  size_t size() const { return live_.size(); }
  Extent At(size_t index) const {
    auto it = std::next(live_.begin(), static_cast<std::ptrdiff_t>(index));
    return {it->first, it->second};
  }

  uint64_t SlabLength(uint64_t i) const { return std::min(slab_, capacity_ - i * slab_); }

  void CheckStats(const TierStats& stats) const {
    uint64_t used = 0;
    for (const auto& [offset, length] : live_) used += length;
    uint64_t reserved = 0;
    for (uint64_t i : UsedSlabs()) reserved += SlabLength(i);
    EXPECT_EQ(stats.capacity_bytes, capacity_);
    EXPECT_EQ(stats.used_bytes, used);
    EXPECT_EQ(stats.block_count, live_.size());
    EXPECT_EQ(stats.reserved_bytes, reserved);
    const double fragmentation = reserved == 0 ? 0.0 : 1.0 - double(used) / double(reserved);
    EXPECT_DOUBLE_EQ(stats.fragmentation, fragmentation);
  }

  // True when a request of `bytes` had room: a free slab (or run of them) or a free slot in a
  // slab of the same slot size.
  bool HasRoomFor(uint64_t bytes) const {
    const std::set<uint64_t> used = UsedSlabs();
    if (bytes > slab_) {
      uint64_t run = 0;
      for (uint64_t i = 0; i < slab_count_; ++i) {
        run = used.contains(i) ? 0 : run + SlabLength(i);
        if (run >= bytes) return true;
      }
      return false;
    }
    const uint64_t slot = (bytes + alignment_ - 1) / alignment_ * alignment_;
    std::map<uint64_t, uint64_t> blocks_of_class;  // slab -> live blocks of this slot size
    for (const auto& [offset, length] : live_) {
      if (length <= slab_ && (length + alignment_ - 1) / alignment_ * alignment_ == slot) {
        ++blocks_of_class[offset / slab_];
      }
    }
    for (uint64_t i = 0; i < slab_count_; ++i) {
      if (!used.contains(i) && SlabLength(i) >= slot) return true;
      auto it = blocks_of_class.find(i);
      if (it != blocks_of_class.end() && it->second < SlabLength(i) / slot) return true;
    }
    return false;
  }

 private:
  std::set<uint64_t> UsedSlabs() const {
    std::set<uint64_t> used;
    for (const auto& [offset, length] : live_) {
      for (uint64_t i = offset / slab_; i <= (offset + length - 1) / slab_; ++i) used.insert(i);
    }
    return used;
  }

  uint64_t capacity_, slab_, alignment_, slab_count_;
  std::map<uint64_t, uint64_t> live_;  // offset -> length
};

TEST(SlabAllocatorTest, CreateRejectsBadOptions) {
  auto create = [](uint64_t capacity, uint64_t slab, uint64_t alignment) {
    return SlabAllocator::Create(
               {.capacity_bytes = capacity, .slab_bytes = slab, .alignment = alignment})
        .status()
        .code();
  };
  EXPECT_EQ(create(kMiB, 64 * kKiB, 0), StatusCode::kInvalidArgument);
  EXPECT_EQ(create(kMiB, 64 * kKiB, 3000), StatusCode::kInvalidArgument);
  EXPECT_EQ(create(kMiB, 0, 4096), StatusCode::kInvalidArgument);
  EXPECT_EQ(create(kMiB, 64 * kKiB + 512, 4096), StatusCode::kInvalidArgument);
  EXPECT_EQ(create(kMiB, 4096 * kMiB, 4096), StatusCode::kInvalidArgument);
  EXPECT_EQ(create(0, 64 * kKiB, 4096), StatusCode::kInvalidArgument);
  EXPECT_EQ(create(4095, 64 * kKiB, 4096), StatusCode::kInvalidArgument);
  EXPECT_EQ(create(kMiB, 64 * kKiB, 4096), StatusCode::kOk);
}

TEST(SlabAllocatorTest, CapacityBelowSlabSizeIsOneSlab) {
  SlabAllocator allocator = MakeAllocator(10 * kKiB + 100, 64 * kMiB);
  EXPECT_EQ(allocator.slab_count(), 1u);
  EXPECT_EQ(allocator.slab_bytes(), 8 * kKiB);
  EXPECT_EQ(allocator.capacity_bytes(), 8 * kKiB);
  EXPECT_EQ(allocator.Allocate(8 * kKiB + 1).status().code(), StatusCode::kRejected);
  EXPECT_EQ(MustAllocate(allocator, 8 * kKiB), (Extent{0, 8 * kKiB}));
}

TEST(SlabAllocatorTest, ZeroBytesIsInvalidAndTooBigIsRejected) {
  SlabAllocator allocator = MakeAllocator(kMiB, 64 * kKiB);
  EXPECT_EQ(allocator.Allocate(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(allocator.Allocate(kMiB + 1).status().code(), StatusCode::kRejected);
  EXPECT_EQ(allocator.Allocate(UINT64_MAX).status().code(), StatusCode::kRejected);
  EXPECT_EQ(allocator.Stats().block_count, 0u);
}

TEST(SlabAllocatorTest, OneClassFillsEverySlotThenIsBusy) {
  SlabAllocator allocator = MakeAllocator(256 * kKiB, 64 * kKiB);  // 4 slabs of 16 slots
  ReferenceModel model(allocator);
  for (int i = 0; i < 64; ++i) {
    ASSERT_NO_FATAL_FAILURE(model.Add(MustAllocate(allocator, 4000), 4000));
  }
  EXPECT_EQ(allocator.Allocate(4000).status().code(), StatusCode::kBusy);
  EXPECT_EQ(allocator.free_slab_count(), 0u);
  model.CheckStats(allocator.Stats());
  EXPECT_EQ(allocator.Stats().reserved_bytes, 256 * kKiB);
}

// What a block takes (MEMORY USAGE, room planning): its small slot, its slot, or its run of slabs.
TEST(SlabAllocatorTest, AFootprintIsTheSlotTheBlockGets) {
  SlabAllocator allocator =
      SlabAllocator::Create(
          {.capacity_bytes = 2 * kMiB, .slab_bytes = 128 * kKiB, .small_slot_max_bytes = 2 * kKiB})
          .value();
  EXPECT_EQ(allocator.FootprintOf(28), 64u);
  EXPECT_EQ(allocator.FootprintOf(1500), 2 * kKiB);
  EXPECT_EQ(allocator.FootprintOf(4 * kKiB), 4 * kKiB);
  EXPECT_EQ(allocator.FootprintOf(5000), 8 * kKiB);
  EXPECT_EQ(allocator.FootprintOf(128 * kKiB), 128 * kKiB);
  EXPECT_EQ(allocator.FootprintOf(128 * kKiB + 1), 256 * kKiB);
  // Two blocks of 5000 bytes lie a footprint apart.
  const Result<Extent> first = allocator.Allocate(5000), second = allocator.Allocate(5000);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(std::max(first->offset, second->offset) - std::min(first->offset, second->offset),
            allocator.FootprintOf(5000));
}

TEST(SlabAllocatorTest, FragmentationCountsRoundingAndEmptySlots) {
  SlabAllocator allocator = MakeAllocator(256 * kKiB, 64 * kKiB);
  MustAllocate(allocator, 4 * kKiB);
  TierStats stats = allocator.Stats();
  EXPECT_EQ(stats.reserved_bytes, 64 * kKiB);
  EXPECT_DOUBLE_EQ(stats.fragmentation, 1.0 - 1.0 / 16.0);

  SlabAllocator full = MakeAllocator(64 * kKiB, 64 * kKiB);
  for (int i = 0; i < 16; ++i) MustAllocate(full, 4 * kKiB);
  EXPECT_DOUBLE_EQ(full.Stats().fragmentation, 0.0);

  // 5000 bytes take an 8 KiB slot; 8 of them fill a 64 KiB slab.
  SlabAllocator rounded = MakeAllocator(64 * kKiB, 64 * kKiB);
  for (int i = 0; i < 8; ++i) MustAllocate(rounded, 5000);
  EXPECT_EQ(rounded.Allocate(5000).status().code(), StatusCode::kBusy);
  EXPECT_DOUBLE_EQ(rounded.Stats().fragmentation, 1.0 - 8.0 * 5000 / (64.0 * kKiB));
}

TEST(SlabAllocatorTest, SlabTailThatFitsNoSlotIsReservedButUnused) {
  SlabAllocator allocator = MakeAllocator(64 * kKiB, 64 * kKiB);
  // 20 KiB slots: three fit, the last 4 KiB of the slab is never handed out.
  for (int i = 0; i < 3; ++i) MustAllocate(allocator, 20 * kKiB);
  EXPECT_EQ(allocator.Allocate(20 * kKiB).status().code(), StatusCode::kBusy);
  EXPECT_EQ(allocator.Allocate(4 * kKiB).status().code(), StatusCode::kBusy);
}

TEST(SlabAllocatorTest, EmptiedSlabsReturnToThePoolForOtherClasses) {
  SlabAllocator allocator = MakeAllocator(256 * kKiB, 64 * kKiB);
  std::vector<Extent> small;
  for (int i = 0; i < 64; ++i) small.push_back(MustAllocate(allocator, 4 * kKiB));
  EXPECT_EQ(allocator.Allocate(8 * kKiB).status().code(), StatusCode::kBusy);
  for (const Extent& extent : small) ASSERT_TRUE(allocator.Free(extent).ok());
  EXPECT_EQ(allocator.free_slab_count(), 4u);
  EXPECT_EQ(allocator.Stats().reserved_bytes, 0u);
  EXPECT_DOUBLE_EQ(allocator.Stats().fragmentation, 0.0);

  ReferenceModel model(allocator);
  for (int i = 0; i < 32; ++i) {
    ASSERT_NO_FATAL_FAILURE(model.Add(MustAllocate(allocator, 8 * kKiB), 8 * kKiB));
  }
  EXPECT_EQ(allocator.Allocate(8 * kKiB).status().code(), StatusCode::kBusy);
  model.CheckStats(allocator.Stats());
}

TEST(SlabAllocatorTest, OnePartlyUsedSlabKeepsItsClass) {
  SlabAllocator allocator = MakeAllocator(128 * kKiB, 64 * kKiB);
  std::vector<Extent> small;
  for (int i = 0; i < 32; ++i) small.push_back(MustAllocate(allocator, 4 * kKiB));
  // Free all but one block of the second slab: it stays with the 4 KiB class.
  for (int i = 16; i < 31; ++i) ASSERT_TRUE(allocator.Free(small[i]).ok());
  EXPECT_EQ(allocator.Allocate(8 * kKiB).status().code(), StatusCode::kBusy);
  ASSERT_TRUE(allocator.Free(small[31]).ok());
  EXPECT_EQ(MustAllocate(allocator, 8 * kKiB).offset, 64 * kKiB);
}

TEST(SlabAllocatorTest, LargeBlockTakesContiguousSlabs) {
  SlabAllocator allocator = MakeAllocator(256 * kKiB, 64 * kKiB);
  Extent big = MustAllocate(allocator, 150 * kKiB);  // 3 slabs
  EXPECT_EQ(big.offset % (64 * kKiB), 0u);
  EXPECT_EQ(big.length, 150 * kKiB);
  EXPECT_EQ(allocator.Stats().reserved_bytes, 192 * kKiB);
  EXPECT_EQ(allocator.free_slab_count(), 1u);
  EXPECT_EQ(allocator.Allocate(100 * kKiB).status().code(), StatusCode::kBusy);
  EXPECT_TRUE(allocator.Allocate(64 * kKiB).ok());
  ASSERT_TRUE(allocator.Free(big).ok());
  EXPECT_EQ(allocator.free_slab_count(), 3u);
  EXPECT_TRUE(allocator.Allocate(192 * kKiB).ok());
}

TEST(SlabAllocatorTest, LargeBlockNeedsContiguityNotJustFreeBytes) {
  SlabAllocator allocator = MakeAllocator(256 * kKiB, 64 * kKiB);
  std::vector<Extent> slabs;
  for (int i = 0; i < 4; ++i) slabs.push_back(MustAllocate(allocator, 64 * kKiB));
  ASSERT_TRUE(allocator.Free(slabs[0]).ok());
  ASSERT_TRUE(allocator.Free(slabs[2]).ok());
  EXPECT_EQ(allocator.free_slab_count(), 2u);
  EXPECT_EQ(allocator.Allocate(128 * kKiB).status().code(), StatusCode::kBusy);
  ASSERT_TRUE(allocator.Free(slabs[1]).ok());
  EXPECT_EQ(MustAllocate(allocator, 192 * kKiB).offset, 0u);
}

TEST(SlabAllocatorTest, ShortLastSlabIsUsed) {
  // 2 full slabs of 64 KiB and a last one of 12 KiB; the 100 bytes below alignment are dropped.
  SlabAllocator allocator = MakeAllocator(140 * kKiB + 100, 64 * kKiB);
  EXPECT_EQ(allocator.capacity_bytes(), 140 * kKiB);
  EXPECT_EQ(allocator.slab_count(), 3u);
  ReferenceModel model(allocator);
  for (int i = 0; i < 35; ++i) {
    ASSERT_NO_FATAL_FAILURE(model.Add(MustAllocate(allocator, 4 * kKiB), 4 * kKiB));
  }
  EXPECT_EQ(allocator.Allocate(4 * kKiB).status().code(), StatusCode::kBusy);
  model.CheckStats(allocator.Stats());
  EXPECT_DOUBLE_EQ(allocator.Stats().fragmentation, 0.0);
}

TEST(SlabAllocatorTest, ShortLastSlabIsSkippedForSlotsItCannotHold) {
  SlabAllocator allocator = MakeAllocator(140 * kKiB, 64 * kKiB);
  Extent a = MustAllocate(allocator, 32 * kKiB);
  Extent b = MustAllocate(allocator, 64 * kKiB);
  EXPECT_NE(a.offset / (64 * kKiB), b.offset / (64 * kKiB));
  EXPECT_LT(b.offset, 128 * kKiB);
  EXPECT_EQ(allocator.Allocate(64 * kKiB).status().code(), StatusCode::kBusy);
  EXPECT_EQ(MustAllocate(allocator, 12 * kKiB).offset, 128 * kKiB);
}

TEST(SlabAllocatorTest, DoubleFreeIsDetectedAndChangesNothing) {
  SlabAllocator allocator = MakeAllocator(256 * kKiB, 64 * kKiB);
  Extent a = MustAllocate(allocator, 4 * kKiB);
  Extent b = MustAllocate(allocator, 4 * kKiB);
  Extent big = MustAllocate(allocator, 100 * kKiB);
  ASSERT_TRUE(allocator.Free(a).ok());
  ASSERT_TRUE(allocator.Free(big).ok());
  const TierStats before = allocator.Stats();
  EXPECT_EQ(allocator.Free(a).code(), StatusCode::kInternal);
  EXPECT_EQ(allocator.Free(big).code(), StatusCode::kInternal);
  const TierStats after = allocator.Stats();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.block_count, before.block_count);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  // The slot freed once is handed out exactly once more.
  EXPECT_EQ(MustAllocate(allocator, 4 * kKiB), a);
  EXPECT_NE(MustAllocate(allocator, 4 * kKiB), a);
  ASSERT_TRUE(allocator.Free(b).ok());
}

TEST(SlabAllocatorTest, UnknownExtentsAreDetected) {
  SlabAllocator allocator = MakeAllocator(512 * kKiB, 64 * kKiB);
  Extent slot = MustAllocate(allocator, 8 * kKiB);
  Extent big = MustAllocate(allocator, 130 * kKiB);
  const TierStats before = allocator.Stats();
  const std::vector<Extent> bad = {
      {slot.offset, slot.length + 1},       // wrong length, same slot size
      {slot.offset, 4 * kKiB},              // wrong length
      {slot.offset + 4 * kKiB, 4 * kKiB},   // inside a slot
      {slot.offset + 8 * kKiB, 8 * kKiB},   // a slot never handed out
      {big.offset, big.length - 1},         // wrong length of a run
      {big.offset + 64 * kKiB, 64 * kKiB},  // a slab inside a run
      {big.offset + 4 * kKiB, 4 * kKiB},    // inside the run's first slab
      {448 * kKiB, 4 * kKiB},               // a free slab
      {512 * kKiB, 4 * kKiB},               // past the end
      {0, 0},                               // empty
      {4 * kKiB, UINT64_MAX},               // overflowing
  };
  for (const Extent& extent : bad) {
    EXPECT_EQ(allocator.Free(extent).code(), StatusCode::kInternal)
        << extent.offset << "+" << extent.length;
  }
  const TierStats after = allocator.Stats();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.block_count, before.block_count);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  EXPECT_TRUE(allocator.Free(slot).ok());
  EXPECT_TRUE(allocator.Free(big).ok());
  EXPECT_EQ(allocator.Stats().reserved_bytes, 0u);
}

TEST(SlabAllocatorTest, AllocFreeCycleOfOneBlockStaysInOneSlab) {
  SlabAllocator allocator = MakeAllocator(256 * kKiB, 64 * kKiB);
  for (int i = 0; i < 100000; ++i) {
    Extent extent = MustAllocate(allocator, 2 * kKiB);
    ASSERT_EQ(extent.offset, 0u);
    ASSERT_TRUE(allocator.Free(extent).ok());
  }
  EXPECT_EQ(allocator.Stats().reserved_bytes, 0u);
}

// Random allocations and frees of mixed sizes (several slot classes, exact slabs, multi-slab runs)
// checked after every step against the reference model; every kBusy must be a true "no room".
void RunRandomised(uint32_t seed, uint64_t capacity, uint64_t slab) {
  SlabAllocator allocator = MakeAllocator(capacity, slab);
  ReferenceModel model(allocator);
  std::mt19937_64 rng(seed);
  const std::vector<uint64_t> sizes = {1,        4 * kKiB, 5000,     8 * kKiB,           20 * kKiB,
                                       slab - 1, slab,     slab + 1, 2 * slab + 7 * kKiB};
  std::vector<Extent> freed;
  for (int step = 0; step < 20000; ++step) {
    const uint64_t dice = rng() % 100;
    if (dice < 55 || model.size() == 0) {
      const uint64_t bytes = sizes[rng() % sizes.size()];
      Result<Extent> extent = allocator.Allocate(bytes);
      if (extent.ok()) {
        ASSERT_NO_FATAL_FAILURE(model.Add(*extent, bytes)) << "step " << step;
      } else {
        ASSERT_EQ(extent.status().code(), StatusCode::kBusy) << extent.status().ToString();
        ASSERT_FALSE(model.HasRoomFor(bytes)) << "step " << step << " bytes " << bytes;
      }
    } else if (dice < 95) {
      const Extent extent = model.At(rng() % model.size());
      ASSERT_TRUE(allocator.Free(extent).ok());
      model.Remove(extent);
      freed.push_back(extent);
    } else if (!freed.empty()) {
      const Extent extent = freed[rng() % freed.size()];
      if (!model.Contains(extent)) {
        ASSERT_EQ(allocator.Free(extent).code(), StatusCode::kInternal) << "step " << step;
      }
    }
    model.CheckStats(allocator.Stats());
    if (::testing::Test::HasFailure()) FAIL() << "seed " << seed << " step " << step;
  }
  while (model.size() > 0) {
    const Extent extent = model.At(0);
    ASSERT_TRUE(allocator.Free(extent).ok());
    model.Remove(extent);
  }
  EXPECT_EQ(allocator.free_slab_count(), allocator.slab_count());
  model.CheckStats(allocator.Stats());
}

// A 28-byte value (an LMCache metadata record) takes a 64-byte slot, not a 4 KiB one: 64 of them
// share one 4 KiB unit, each at an offset of its own slot size.
TEST(SlabAllocatorTest, SmallSlotsPackSmallValues) {
  SlabAllocator allocator =
      SlabAllocator::Create(
          {.capacity_bytes = 2 * kMiB, .slab_bytes = 128 * kKiB, .small_slot_max_bytes = 2 * kKiB})
          .value();
  std::vector<Extent> tiny;
  for (int i = 0; i < 64; ++i) tiny.push_back(allocator.Allocate(28).value());
  for (size_t i = 0; i < tiny.size(); ++i) {
    EXPECT_EQ(tiny[i].offset % 64, 0u);
    EXPECT_EQ(tiny[i].length, 28u);
    if (i > 0) EXPECT_EQ(tiny[i].offset, tiny[i - 1].offset + 64);
  }
  EXPECT_EQ(allocator.Stats().used_bytes, 64u * 28);
  EXPECT_EQ(allocator.free_slab_count(), allocator.slab_count() - 1);  // one slab holds them all
  // Classes by power of two; above the small limit, by alignment as before.
  EXPECT_EQ(allocator.Allocate(65).value().offset % 128, 0u);
  const Extent medium = allocator.Allocate(2 * kKiB + 1).value();
  EXPECT_EQ(medium.offset % (4 * kKiB), 0u);
  for (const Extent& e : tiny) ASSERT_TRUE(allocator.Free(e).ok());
  // Without the option a small value still takes a whole aligned slot.
  SlabAllocator plain = MakeAllocator(2 * kMiB, 128 * kKiB);
  const Extent a = plain.Allocate(28).value();
  const Extent b = plain.Allocate(28).value();
  EXPECT_EQ(b.offset - a.offset, 4 * kKiB);
}

// Regression: freeing the page that holds small slots, as if it were an ordinary block, was
// taken: the page went back while its slots were live, used_bytes wrapped below zero, and the
// next 4 KiB block was handed the same bytes as the small ones.
TEST(SlabAllocatorTest, ThePageOfSmallSlotsIsNotABlockToFree) {
  SlabAllocator allocator =
      SlabAllocator::Create(
          {.capacity_bytes = 2 * kMiB, .slab_bytes = 128 * kKiB, .small_slot_max_bytes = 2 * kKiB})
          .value();
  const Extent a = allocator.Allocate(100).value();
  const Extent b = allocator.Allocate(100).value();
  const uint64_t page = a.offset & ~(4 * kKiB - 1);
  const TierStats before = allocator.Stats();
  const Status freed = allocator.Free(Extent{page, 4 * kKiB});
  EXPECT_EQ(freed.code(), StatusCode::kInternal) << freed.ToString();
  EXPECT_EQ(allocator.Stats().used_bytes, before.used_bytes);
  EXPECT_EQ(allocator.Stats().block_count, before.block_count);
  const Extent next = allocator.Allocate(4 * kKiB).value();
  EXPECT_NE(next.offset, page);
  ASSERT_TRUE(allocator.Free(a).ok());
  ASSERT_TRUE(allocator.Free(b).ok());
  ASSERT_TRUE(allocator.Free(next).ok());
  EXPECT_EQ(allocator.Stats().used_bytes, 0u);
}

// Small slots of every size come out of pages of one ordinary class, so a single slab serves
// them all (no slab per size of small value), and an emptied page is an ordinary free slot again.
TEST(SlabAllocatorTest, SmallSlotsOfEverySizeShareOneSlabAndPagesComeBack) {
  SlabAllocator allocator = SlabAllocator::Create({.capacity_bytes = 128 * kKiB,
                                                   .slab_bytes = 128 * kKiB,
                                                   .small_slot_max_bytes = 2 * kKiB})
                                .value();
  std::vector<Extent> small;
  for (uint64_t bytes : {1u, 28u, 64u, 65u, 200u, 700u, 1500u, 2048u}) {
    small.push_back(allocator.Allocate(bytes).value());
  }
  const Extent ordinary = allocator.Allocate(4 * kKiB).value();
  EXPECT_EQ(allocator.free_slab_count(), 0u);
  EXPECT_EQ(allocator.Stats().block_count, 9u);
  EXPECT_EQ(allocator.Free(Extent{small[1].offset, 29}).code(), StatusCode::kInternal);
  for (const Extent& e : small) ASSERT_TRUE(allocator.Free(e).ok());
  EXPECT_EQ(allocator.Free(small[0]).code(), StatusCode::kInternal);  // a double free
  EXPECT_EQ(allocator.Stats().used_bytes, 4 * kKiB);
  ASSERT_TRUE(allocator.Free(ordinary).ok());
  EXPECT_EQ(allocator.free_slab_count(), 1u);  // every page went back, and with them the slab
  EXPECT_EQ(allocator.Stats().block_count, 0u);
}

TEST(SlabAllocatorTest, RandomisedAgainstReferenceModel) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    RunRandomised(seed, 2 * kMiB, 128 * kKiB);
  }
}

TEST(SlabAllocatorTest, RandomisedWithShortLastSlab) {
  for (uint32_t seed = 11; seed <= 14; ++seed) {
    RunRandomised(seed, 2 * kMiB + 40 * kKiB, 128 * kKiB);
  }
}

}  // namespace
}  // namespace kvtier::tiers
