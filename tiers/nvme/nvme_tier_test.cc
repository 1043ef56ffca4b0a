#include "tiers/nvme/nvme_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "tiers/nvme/aligned_buffer.h"
#include "tiers/nvme/data_file.h"
#include "tiers/nvme/testing/loop_device.h"
#include "tiers/nvme/testing/temp_dir.h"
#include "tiers/nvme/testing/test_blocks.h"

namespace kvtier::tiers::nvme {
namespace {

constexpr uint64_t kMiB = 1 << 20;

BlockIdentity Id(uint64_t i) { return testing::TestBlockId(i); }
void Fill(std::span<std::byte> out, uint64_t i) { testing::FillTestBlock(out, i); }

class NvmeTierTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  NvmeTier::Options Opts(uint64_t capacity = 64 * kMiB) {
    NvmeTier::Options o;
    o.data_dir = dir_.file("nvme");
    o.capacity_bytes = capacity;
    o.io.kind = GetParam();
    o.io.queue_depth = 8;
    return o;
  }
  std::unique_ptr<NvmeTier> OpenTier(const NvmeTier::Options& o) {
    auto t = NvmeTier::Open(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  // Allocates and writes block i of `bytes`; returns its extent.
  Extent Put(NvmeTier& tier, uint64_t i, uint64_t bytes) {
    auto e = tier.Allocate(bytes);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    AlignedBuffer buf(bytes);
    Fill(buf.span(), i);
    Status st = tier.WriteBlock(*e, Id(i), buf.span());
    EXPECT_TRUE(st.ok()) << st.ToString();
    return *e;
  }
  // True when the block at e reads back as block i.
  ::testing::AssertionResult ReadsBack(NvmeTier& tier, const Extent& e, uint64_t i) {
    AlignedBuffer got(e.length), want(e.length);
    Fill(want.span(), i);
    Status st = tier.ReadBlock(e, Id(i), got.span());
    if (!st.ok()) return ::testing::AssertionFailure() << st.ToString();
    if (std::memcmp(got.data(), want.data(), e.length) != 0) {
      return ::testing::AssertionFailure() << "wrong bytes for block " << i;
    }
    return ::testing::AssertionSuccess();
  }

  // Settles the blocks found at open as the adoption does: of them only `kept` still awaits it
  // (and only once); then, the tier closed and opened again, `kept` is the one block found.
  void ExpectOnlyKeptAwaitsAndComesBack(std::unique_ptr<NvmeTier> tier,
                                        const std::vector<RecoveredBlock>& found,
                                        const Extent& kept) {
    for (const RecoveredBlock& b : found) {
      EXPECT_EQ(tier->SettleRecovered(b.extent), b.extent == kept) << b.extent.offset;
    }
    EXPECT_FALSE(tier->SettleRecovered(kept));
    tier.reset();
    tier = OpenTier(Opts());
    const std::vector<RecoveredBlock> rec = tier->TakeRecovered();
    ASSERT_EQ(rec.size(), 1u);
    EXPECT_EQ(rec[0].extent, kept);
  }

  testing::TempDir dir_;
};

INSTANTIATE_TEST_SUITE_P(Backends, NvmeTierTest,
                         ::testing::Values(IoBackendKind::kIoUring, IoBackendKind::kThreads),
                         [](const auto& info) {
                           return std::string(IoBackendKindName(info.param));
                         });

TEST_P(NvmeTierTest, BlocksOfManySizesRoundTrip) {
  auto tier = OpenTier(Opts());
  EXPECT_EQ(tier->id(), TierId::kNvme);
  EXPECT_EQ(tier->Address({0, 4096}), nullptr);
  const uint64_t sizes[] = {1, 100, 4095, 4096, 4097, 65536 + 17, 2 * kMiB, 2 * kMiB + 1};
  std::vector<Extent> extents;
  for (uint64_t i = 0; i < std::size(sizes); ++i) extents.push_back(Put(*tier, i, sizes[i]));
  for (uint64_t i = 0; i < std::size(sizes); ++i) EXPECT_TRUE(ReadsBack(*tier, extents[i], i));
  NvmeStats s = tier->nvme_stats();
  EXPECT_EQ(s.writes, std::size(sizes));
  EXPECT_EQ(s.reads, std::size(sizes));
  EXPECT_EQ(s.io_uring, GetParam() == IoBackendKind::kIoUring);
  EXPECT_EQ(s.checksum_failures, 0u);
}

TEST_P(NvmeTierTest, UnalignedCallerBuffersWork) {
  auto tier = OpenTier(Opts());
  std::vector<std::byte> src(3 * 4096 + 5), dst(src.size());
  Fill(src, 9);
  Extent e = *tier->Allocate(src.size());
  ASSERT_TRUE(tier->WriteBlock(e, Id(9), std::span(src).subspan(0)).ok());
  std::vector<std::byte> shifted(src.size() + 1);
  ASSERT_TRUE(tier->ReadBlock(e, Id(9), std::span(shifted).subspan(1)).ok());
  EXPECT_EQ(std::memcmp(shifted.data() + 1, src.data(), src.size()), 0);
}

TEST_P(NvmeTierTest, ReadChecksArguments) {
  auto tier = OpenTier(Opts());
  Extent e = *tier->Allocate(8192);
  AlignedBuffer buf(8192);
  EXPECT_EQ(tier->ReadBlock(e, Id(1), buf.span()).code(), StatusCode::kNotFound);
  ASSERT_TRUE(tier->WriteBlock(e, Id(1), buf.span()).ok());
  AlignedBuffer larger(8193);
  EXPECT_EQ(tier->ReadBlock(e, Id(1), larger.span()).code(), StatusCode::kInvalidArgument);
  AlignedBuffer big(8193);
  EXPECT_EQ(tier->WriteBlock(e, Id(1), big.span()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->WriteBlock({e.offset + 65536, 8192}, Id(1), buf.span()).code(),
            StatusCode::kInvalidArgument);
}

TEST_P(NvmeTierTest, APrefixCanBeReadAndIsStillVerified) {
  auto tier = OpenTier(Opts());
  Extent e = Put(*tier, 4, 3 * 4096 + 10);
  AlignedBuffer want(e.length), got(5000);
  Fill(want.span(), 4);
  ASSERT_TRUE(tier->ReadBlock(e, Id(4), got.span()).ok());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
  AlignedBuffer small(100);
  ASSERT_TRUE(tier->Read(e, small.span()).ok());
  EXPECT_EQ(std::memcmp(small.data(), want.data(), small.size()), 0);
  EXPECT_EQ(tier->ReadBlock(e, Id(5), got.span()).code(), StatusCode::kChecksumMismatch);
}

TEST_P(NvmeTierTest, AnotherIdentityIsAChecksumMismatch) {
  auto tier = OpenTier(Opts());
  Extent e = Put(*tier, 1, 3 * 4096);
  AlignedBuffer buf(e.length);
  EXPECT_EQ(tier->ReadBlock(e, Id(2), buf.span()).code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(tier->nvme_stats().checksum_failures, 1u);
  EXPECT_TRUE(ReadsBack(*tier, e, 1));
}

// The blocks starting in a range (the store's reclaim unit), named from the tier's own entries
// rather than found by a scan of the store's index: probed offset by offset where the range has
// fewer offsets than the tier has blocks, else by a walk of them.
TEST_P(NvmeTierTest, BlocksStartingInARangeAreNamed) {
  auto tier = OpenTier(Opts());
  std::vector<Extent> extents;
  for (uint64_t i = 0; i < 32; ++i) extents.push_back(Put(*tier, i, 5000));  // 12 KiB apart
  tier->Free(extents[3]);
  const auto keys_of = [](const std::optional<std::vector<BlockIdentity>>& ids) {
    std::set<uint64_t> keys;
    for (const BlockIdentity& id : ids.value()) keys.insert(id.key.high);
    return keys;
  };
  const uint64_t from = extents[2].offset;
  const Extent probed{from, extents[6].offset - from};  // 12 offsets, 31 blocks: blocks 2 to 5
  EXPECT_EQ(keys_of(tier->BlocksStartingIn(probed)), (std::set<uint64_t>{2, 4, 5}));
  const Extent off_boundary{from + 1, extents[5].offset - from};  // starts inside block 2
  EXPECT_EQ(keys_of(tier->BlocksStartingIn(off_boundary)), (std::set<uint64_t>{4, 5}));
  const Extent walked{0, tier->Stats().capacity_bytes};
  std::set<uint64_t> all;
  for (uint64_t i = 0; i < 32; ++i) {
    if (i != 3) all.insert(i);
  }
  EXPECT_EQ(keys_of(tier->BlocksStartingIn(walked)), all);
}

TEST_P(NvmeTierTest, PlainWriteAndReadWorkButAreNotRecovered) {
  auto o = Opts();
  {
    auto tier = OpenTier(o);
    Extent e = *tier->Allocate(5000);
    AlignedBuffer in(5000), out(5000);
    Fill(in.span(), 5);
    ASSERT_TRUE(tier->Write(e, in.span()).ok());
    ASSERT_TRUE(tier->Read(e, out.span()).ok());
    EXPECT_EQ(std::memcmp(in.data(), out.data(), 5000), 0);
  }
  auto tier = OpenTier(o);
  EXPECT_TRUE(tier->TakeRecovered().empty());
  EXPECT_EQ(tier->Stats().block_count, 0u);
}

// What the daemon's sync schedule (sync_schedule.h) asks: blocks written since the last Sync, and
// how many of them the caller acknowledges as durable.
TEST_P(NvmeTierTest, CountsWritesUntilASyncAndWriteThroughCopiesApart) {
  auto tier = OpenTier(Opts());
  EXPECT_EQ(tier->unsynced_writes().blocks, 0u);
  Put(*tier, 1, 4096);
  Put(*tier, 2, 4096);
  AlignedBuffer buf(4096);
  Fill(buf.span(), 3);
  auto e = tier->Allocate(4096);
  ASSERT_TRUE(e.ok());
  BlockWrite acknowledged{*e, Id(3), buf.span(), {}, /*must_survive_restart=*/true};
  tier->WriteBlocks({&acknowledged, 1});
  ASSERT_TRUE(acknowledged.status.ok()) << acknowledged.status.ToString();
  EXPECT_EQ(tier->unsynced_writes().blocks, 3u);
  EXPECT_EQ(tier->unsynced_writes().acknowledged, 1u);
  EXPECT_EQ(tier->nvme_stats().syncs, 0u);
  ASSERT_TRUE(tier->Sync().ok());
  EXPECT_EQ(tier->unsynced_writes().blocks, 0u);
  EXPECT_EQ(tier->unsynced_writes().acknowledged, 0u);
  EXPECT_EQ(tier->nvme_stats().syncs, 1u);
  EXPECT_GE(tier->nvme_stats().sync_us, tier->nvme_stats().longest_sync_us);
  Put(*tier, 4, 4096);
  EXPECT_EQ(tier->unsynced_writes().blocks, 1u);
  EXPECT_EQ(tier->unsynced_writes().acknowledged, 0u);
}

// A block written as cache whose put is then acknowledged as durable (its write-through copy
// was owed, and this is it) counts toward the acknowledged blocks' sync from then on.
TEST_P(NvmeTierTest, ACacheCopyMadeToSurviveARestartCountsAsAcknowledged) {
  auto tier = OpenTier(Opts());
  const Extent cached = Put(*tier, 1, 4096);
  EXPECT_EQ(tier->unsynced_writes().acknowledged, 0u);
  ASSERT_TRUE(tier->MustSurviveRestart(cached).ok());
  EXPECT_EQ(tier->unsynced_writes().acknowledged, 1u);
  ASSERT_TRUE(tier->Sync().ok());
  EXPECT_EQ(tier->unsynced_writes().acknowledged, 0u);
  auto empty = tier->Allocate(4096);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(tier->MustSurviveRestart(*empty).code(), StatusCode::kNotFound);
  // Written without an identity: no catalog record, so a restart would not find it.
  AlignedBuffer buf(4096);
  Fill(buf.span(), 2);
  ASSERT_TRUE(tier->Write(*empty, buf.span()).ok());
  EXPECT_EQ(tier->MustSurviveRestart(*empty).code(), StatusCode::kDeviceError);
}

// Regression: two Syncs at once each subtracted the writes they found waiting, wrapping the
// counters to about 2^64, after which every tick of the schedule synced.
TEST_P(NvmeTierTest, SyncsAtOnceNeverCountMoreWritesSyncedThanWereWritten) {
  auto tier = OpenTier(Opts());
  for (int round = 0; round < 20; ++round) {
    for (uint64_t i = 0; i < 4; ++i) {
      const Extent e = Put(*tier, 100 * round + i, 4096);
      ASSERT_TRUE(tier->MustSurviveRestart(e).ok());
    }
    std::thread other([&] { EXPECT_TRUE(tier->Sync().ok()); });
    EXPECT_TRUE(tier->Sync().ok());
    other.join();
    EXPECT_EQ(tier->unsynced_writes().blocks, 0u) << "round " << round;
    EXPECT_EQ(tier->unsynced_writes().acknowledged, 0u) << "round " << round;
    ASSERT_TRUE(tier->Sync().ok());
  }
}

// A second kvtierd on the same directory is refused before it wipes anything, a forced cold
// start included: the first keeps serving, and its blocks survive its restart.
TEST_P(NvmeTierTest, ASecondOpenOfADirectoryInUseIsRefusedAndWipesNothing) {
  auto o = Opts();
  auto tier = OpenTier(o);
  const Extent e = Put(*tier, 1, 8192);
  ASSERT_TRUE(tier->Sync().ok());
  auto cold = o;
  cold.cold_start = true;
  const Status refused = NvmeTier::Open(cold).status();
  EXPECT_EQ(refused.code(), StatusCode::kBusy) << refused.ToString();
  EXPECT_NE(refused.message().find("in use"), std::string::npos) << refused.message();
  EXPECT_TRUE(ReadsBack(*tier, e, 1));
  tier.reset();
  tier = OpenTier(o);
  EXPECT_EQ(tier->TakeRecovered().size(), 1u);
}

TEST_P(NvmeTierTest, RestartRecoversWrittenBlocksAndForgetsFreedOnes) {
  auto o = Opts();
  std::vector<Extent> extents;
  {
    auto tier = OpenTier(o);
    for (uint64_t i = 0; i < 12; ++i) extents.push_back(Put(*tier, i, 256 * 1024 + i * 4096));
    tier->Free(extents[4]);
    tier->Free(extents[7]);
    Extent orphan = *tier->Allocate(4096);  // allocated, never written: not recovered
    (void)orphan;
  }
  auto tier = OpenTier(o);
  std::vector<RecoveredBlock> rec = tier->TakeRecovered();
  EXPECT_TRUE(tier->TakeRecovered().empty());
  ASSERT_EQ(rec.size(), 10u);
  for (const RecoveredBlock& b : rec) {
    uint64_t i = b.key.high;
    EXPECT_EQ(b.ns, Id(i).ns);
    EXPECT_EQ(b.key, Id(i).key);
    EXPECT_EQ(b.extent, extents[i]);
    EXPECT_TRUE(ReadsBack(*tier, b.extent, i));
  }
  for (size_t k = 1; k < rec.size(); ++k) {
    EXPECT_LE(rec[k - 1].last_access_unix_us, rec[k].last_access_unix_us);
  }
  EXPECT_EQ(tier->nvme_stats().recovered_blocks, 10u);
  EXPECT_EQ(tier->Stats().block_count, 10u);
  // New allocations do not overlap recovered blocks.
  Extent fresh = Put(*tier, 100, 256 * 1024);
  for (const RecoveredBlock& b : rec) {
    bool disjoint = fresh.offset + ExtentFootprint(fresh.length) <= b.extent.offset ||
                    b.extent.offset + ExtentFootprint(b.extent.length) <= fresh.offset;
    EXPECT_TRUE(disjoint);
  }
  for (const RecoveredBlock& b : rec) EXPECT_TRUE(ReadsBack(*tier, b.extent, b.key.high));
}

// nvme.bytes: auto is a share of the free space, which the tier's own file (and anything else on
// the disk) moves between starts: a tier formatted earlier keeps its size and its blocks.
TEST_P(NvmeTierTest, ADefaultCapacityKeepsTheBlocksOfATierFormattedToAnother) {
  auto o = Opts(64 * kMiB);
  std::vector<Extent> extents;
  {
    auto tier = OpenTier(o);
    for (uint64_t i = 0; i < 4; ++i) extents.push_back(Put(*tier, i, 1 * kMiB));
  }
  o.capacity_bytes = 48 * kMiB;
  o.keep_formatted_capacity = true;
  auto tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->Stats().capacity_bytes, 64 * kMiB);
  std::vector<RecoveredBlock> rec = tier->TakeRecovered();
  ASSERT_EQ(rec.size(), 4u);
  for (const RecoveredBlock& b : rec) EXPECT_TRUE(ReadsBack(*tier, b.extent, b.key.high));
}

// Blocks are striped over the data files, so all must be of one size: files that kept unlike
// sizes are formatted to the default.
TEST_P(NvmeTierTest, DataFilesOfUnlikeKeptCapacitiesAreFormattedToTheDefault) {
  auto o = Opts(64 * kMiB);
  o.data_paths = {dir_.file("a.data"), dir_.file("b.data")};
  { ASSERT_NE(OpenTier(o), nullptr); }
  {  // one file replaced by one of another size
    ::unlink(o.data_paths[1].c_str());
    auto other = DataFile::Open({.path = o.data_paths[1], .capacity_bytes = 16 * kMiB});
    ASSERT_TRUE(other.ok());
  }
  o.capacity_bytes = 96 * kMiB;
  o.keep_formatted_capacity = true;
  auto tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->Stats().capacity_bytes, 96 * kMiB);
  EXPECT_TRUE(tier->TakeRecovered().empty());
  Extent e = Put(*tier, 1, 1 * kMiB);
  EXPECT_TRUE(ReadsBack(*tier, e, 1));
}

// The clean-stop flush writes the newest block first and then marks the blocks used oldest first,
// so that the restart hands them over in the order they had in memory.
TEST_P(NvmeTierTest, RecordUseMovesABlockToTheNewEndOfTheRestartOrder) {
  auto o = Opts();
  std::vector<Extent> extents;
  {
    auto tier = OpenTier(o);
    for (uint64_t i = 0; i < 3; ++i) extents.push_back(Put(*tier, i, 8192));
    tier->RecordUse(extents[2]);
    tier->RecordUse(extents[1]);
    tier->RecordUse(extents[0]);
    tier->RecordUse({extents[2].offset + 1, 8192});  // no block there: ignored
  }
  auto tier = OpenTier(o);
  std::vector<RecoveredBlock> rec = tier->TakeRecovered();
  ASSERT_EQ(rec.size(), 3u);
  EXPECT_EQ(rec[0].key, Id(2).key);  // oldest use first
  EXPECT_EQ(rec[1].key, Id(1).key);
  EXPECT_EQ(rec[2].key, Id(0).key);
}

TEST_P(NvmeTierTest, ABlockMovedToANewExtentKeepsItsRecordWhenTheOldOneIsFreed) {
  auto o = Opts();
  Extent second;
  {
    auto tier = OpenTier(o);
    Extent first = Put(*tier, 1, 8192);
    second = Put(*tier, 1, 8192);  // the same block written again elsewhere
    tier->Free(first);
  }
  auto tier = OpenTier(o);
  auto rec = tier->TakeRecovered();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].extent, second);
}

// The reverse order: the newer copy, which holds the catalog record, goes first. The older copy is
// still live, its WriteBlock returned and it was never freed, so a restart must find it.
TEST_P(NvmeTierTest, FreeingTheNewerCopyOfABlockKeepsTheOlderOneRecorded) {
  auto o = Opts();
  Extent first;
  {
    auto tier = OpenTier(o);
    first = Put(*tier, 1, 8192);
    Extent second = Put(*tier, 1, 8192);
    tier->Free(second);
    EXPECT_TRUE(tier->MustSurviveRestart(first).ok());
  }
  {
    auto tier = OpenTier(o);
    auto rec = tier->TakeRecovered();
    ASSERT_EQ(rec.size(), 1u);
    EXPECT_EQ(rec[0].extent, first);
    EXPECT_TRUE(ReadsBack(*tier, first, 1));
    tier->Free(first);  // the last copy: its record goes with it
  }
  auto tier = OpenTier(o);
  EXPECT_TRUE(tier->TakeRecovered().empty());
}

// Keys changed while the blocks found at open await adoption: key 1 written again (its record
// moves to the new copy) and that copy freed (a DEL), which used to pass the record back to the
// copy found at open; key 2 removed before its adoption. The store has the tier drop their copies
// found at open (DropRecoveredCopies): none comes back at the next restart, the adoption leaves
// them alone (SettleRecovered), and the block nobody changed is adopted as before.
TEST_P(NvmeTierTest, CopiesFoundAtOpenDroppedBeforeTheirAdoptionStayGone) {
  auto o = Opts();
  Extent kept;
  {
    auto tier = OpenTier(o);
    Put(*tier, 1, 8192);
    Put(*tier, 2, 8192);
    kept = Put(*tier, 3, 8192);
  }
  {
    auto tier = OpenTier(o);
    const std::vector<RecoveredBlock> found = tier->TakeRecovered();
    ASSERT_EQ(found.size(), 3u);
    const Extent again = Put(*tier, 1, 8192);
    tier->DropRecoveredCopies(Id(1).ns, Id(1).key);
    tier->Free(again);
    tier->DropRecoveredCopies(Id(2).ns, Id(2).key);
    EXPECT_TRUE(ReadsBack(*tier, kept, 3));
    ExpectOnlyKeptAwaitsAndComesBack(std::move(tier), found, kept);
  }
}

// A namespace dropped while the blocks found at open await adoption: its blocks are dropped at
// once, and another namespace's are adopted as before.
TEST_P(NvmeTierTest, ANamespaceDroppedBeforeItsBlocksAreAdoptedGetsNoneBack) {
  auto o = Opts();
  const BlockIdentity other{NamespaceId{{9, 9}}, Id(3).key};
  Extent kept;
  {
    auto tier = OpenTier(o);
    Put(*tier, 1, 8192);
    Put(*tier, 2, 8192);
    kept = *tier->Allocate(8192);
    AlignedBuffer buf(8192);
    Fill(buf.span(), 3);
    ASSERT_TRUE(tier->WriteBlock(kept, other, buf.span()).ok());
  }
  {
    auto tier = OpenTier(o);
    const std::vector<RecoveredBlock> found = tier->TakeRecovered();
    ASSERT_EQ(found.size(), 3u);
    tier->DropRecoveredCopies(Id(1).ns, std::nullopt);
    ExpectOnlyKeptAwaitsAndComesBack(std::move(tier), found, kept);
  }
}

// Two copies of one block written at once: the older copy's record is put, and before its
// WriteBlock returns, a newer copy takes the record over and is freed. The record must pass back
// to the older copy, whose write returned and which was never freed, rather than be deleted
// because the older copy is not yet among the tier's blocks.
TEST_P(NvmeTierTest, ACopyFinishingItsWriteGetsTheRecordBackWhenANewerCopyIsFreedMeanwhile) {
  auto o = Opts();
  std::unique_ptr<NvmeTier> tier;
  Extent older;
  o.record_put_hook = [&](const Extent& e) {
    if (e != older) return;
    std::thread newer([&] { tier->Free(Put(*tier, 1, 8192)); });
    newer.join();
  };
  tier = OpenTier(o);
  older = *tier->Allocate(8192);
  AlignedBuffer buf(8192);
  Fill(buf.span(), 1);
  ASSERT_TRUE(tier->WriteBlock(older, Id(1), buf.span()).ok());
  EXPECT_TRUE(tier->MustSurviveRestart(older).ok());
  tier.reset();
  o.record_put_hook = nullptr;
  tier = OpenTier(o);
  auto rec = tier->TakeRecovered();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].extent, older);
  EXPECT_TRUE(ReadsBack(*tier, older, 1));
}

// A write into an extent that still holds a block (the store always writes into a fresh extent;
// the tier takes it as a rewrite) replaces that block, and its catalog record with it: left naming
// the extent, the old record would overlap the new one at the restart, and the one first in key
// order would keep the extent; after a Free it would bring the freed block back. Both key orders.
TEST_P(NvmeTierTest, ARewriteOfAnExtentTakesTheRecordOfTheBlockItHeld) {
  for (const auto& [held, rewritten] : {std::pair<uint64_t, uint64_t>{1, 2}, {2, 1}}) {
    SCOPED_TRACE("held " + std::to_string(held));
    auto o = Opts();
    o.data_dir = dir_.file("nvme-" + std::to_string(held));
    AlignedBuffer buf(8192);
    Fill(buf.span(), rewritten);
    Extent kept, freed;
    {
      auto tier = OpenTier(o);
      kept = Put(*tier, held, 8192);
      ASSERT_TRUE(tier->WriteBlock(kept, Id(rewritten), buf.span()).ok());
      freed = Put(*tier, held + 10, 8192);
      ASSERT_TRUE(tier->WriteBlock(freed, Id(rewritten + 10), buf.span()).ok());
      tier->Free(freed);
    }
    auto tier = OpenTier(o);
    auto rec = tier->TakeRecovered();
    ASSERT_EQ(rec.size(), 1u);
    EXPECT_EQ(rec[0].key, Id(rewritten).key);
    EXPECT_EQ(rec[0].extent, kept);
    EXPECT_EQ(tier->nvme_stats().dropped_at_recovery, 0u);
    EXPECT_TRUE(ReadsBack(*tier, kept, rewritten));
  }
}

// Freeing an extent twice is a caller bug the tier counts. When the space has meanwhile gone to a
// block of another size at the same offset, the stale Free must not take that block's
// bookkeeping and catalog record with it (the block would read as missing and be lost at the
// restart while its space stayed allocated).
TEST_P(NvmeTierTest, AStaleFreeOfAReusedExtentLeavesTheBlockNowThereAlone) {
  auto o = Opts();
  Extent now;
  {
    auto tier = OpenTier(o);
    Extent old = Put(*tier, 1, 3 * 4096);
    tier->Free(old);
    now = Put(*tier, 2, 4096);
    ASSERT_EQ(now.offset, old.offset);  // best fit, lowest offset: the space just freed
    tier->Free(old);
    EXPECT_EQ(tier->invalid_free_count(), 1u);
    EXPECT_EQ(tier->Stats().block_count, 1u);
    EXPECT_TRUE(ReadsBack(*tier, now, 2));
  }
  auto tier = OpenTier(o);
  auto rec = tier->TakeRecovered();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].extent, now);
  EXPECT_TRUE(ReadsBack(*tier, now, 2));
}

TEST_P(NvmeTierTest, ColdStartOptionAndMarkerWipe) {
  auto o = Opts();
  { Put(*OpenTier(o), 1, 8192); }
  o.cold_start = true;
  { EXPECT_TRUE(OpenTier(o)->TakeRecovered().empty()); }
  o.cold_start = false;
  { Put(*OpenTier(o), 2, 8192); }
  std::ofstream(o.data_dir + "/COLD_START").put('\n');
  { EXPECT_TRUE(OpenTier(o)->TakeRecovered().empty()); }
  EXPECT_FALSE(std::ifstream(o.data_dir + "/COLD_START").good());  // honoured once
}

TEST_P(NvmeTierTest, ACapacityChangeStartsCold) {
  auto o = Opts();
  { Put(*OpenTier(o), 1, 8192); }
  o.capacity_bytes = 32 * kMiB;
  auto tier = OpenTier(o);
  EXPECT_TRUE(tier->TakeRecovered().empty());
  EXPECT_EQ(tier->Stats().capacity_bytes, 32 * kMiB);
}

TEST_P(NvmeTierTest, ADataFileOfAnotherVersionIsRefused) {
  auto o = Opts();
  { OpenTier(o); }
  std::string path = o.data_dir + "/" + std::string(NvmeTier::kDataFileName);
  int fd = ::open(path.c_str(), O_RDWR);
  AlignedBuffer sb(kSuperblockBytes);
  EncodeSuperblock({.format_version = 2, .capacity_bytes = 64 * kMiB, .file_id = 1}, sb.span());
  ASSERT_EQ(::pwrite(fd, sb.data(), kSuperblockBytes, 0), static_cast<ssize_t>(kSuperblockBytes));
  ::close(fd);
  Status st = NvmeTier::Open(o).status();
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("format version 2"), std::string::npos) << st.message();
  o.cold_start = true;
  EXPECT_TRUE(NvmeTier::Open(o).ok());
}

TEST_P(NvmeTierTest, ADamagedCatalogIsDiscardedAndTheTierStartsCold) {
  auto o = Opts();
  { Put(*OpenTier(o), 1, 8192); }
  for (const auto& f : std::filesystem::directory_iterator(o.data_dir + "/catalog")) {
    if (f.path().filename().string().rfind("MANIFEST", 0) == 0) {
      std::ofstream(f.path(), std::ios::trunc) << "this is not a manifest";
    }
  }
  auto tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->TakeRecovered().empty());
  Put(*tier, 2, 8192);
}

TEST_P(NvmeTierTest, DataPathPutsTheBlocksElsewhere) {
  auto o = Opts();
  o.data_paths = {dir_.file("elsewhere.data")};
  { Put(*OpenTier(o), 1, 8192); }
  EXPECT_TRUE(std::filesystem::exists(o.data_paths[0]));
  EXPECT_FALSE(std::filesystem::exists(o.data_dir + "/kvtier-nvme.data"));
  auto tier = OpenTier(o);
  ASSERT_EQ(tier->TakeRecovered().size(), 1u);
  o.cold_start = true;
  tier.reset();
  EXPECT_TRUE(OpenTier(o)->TakeRecovered().empty());
}

TEST_P(NvmeTierTest, SeveralDataFilesShareTheBlocksAndTheRestart) {
  auto o = Opts(3 * 8 * kMiB);
  o.data_paths = {dir_.file("a.data"), dir_.file("b.data"), dir_.file("c.data")};
  std::vector<Extent> extents;
  {
    auto tier = OpenTier(o);
    ASSERT_EQ(tier->data_file_count(), 3u);
    EXPECT_EQ(tier->Stats().capacity_bytes, 24 * kMiB);
    for (uint64_t i = 0; i < 9; ++i) extents.push_back(Put(*tier, i, kMiB));
    for (uint64_t i = 0; i < 9; ++i) {
      EXPECT_EQ(extents[i].offset / (8 * kMiB), i % 3) << "block " << i << " not striped";
    }
    EXPECT_EQ(tier->Allocate(8 * kMiB).status().code(), StatusCode::kRejected);  // > one file
  }
  {
    auto tier = OpenTier(o);
    auto rec = tier->TakeRecovered();
    ASSERT_EQ(rec.size(), 9u);
    for (const auto& b : rec) {
      EXPECT_EQ(b.extent, extents[b.key.high]);
      EXPECT_TRUE(ReadsBack(*tier, b.extent, b.key.high));
    }
  }
  o.data_paths.pop_back();  // another set of files: the catalog no longer applies
  o.capacity_bytes = 2 * 8 * kMiB;
  EXPECT_TRUE(OpenTier(o)->TakeRecovered().empty());
  o.data_paths = {dir_.file("a.data"), dir_.file("a.data")};
  EXPECT_EQ(NvmeTier::Open(o).status().code(), StatusCode::kInvalidArgument);
}

// A raw block device (a loop device here): never formatted unasked, then a tier like any other.
TEST_P(NvmeTierTest, RawBlockDevice) {
  testing::LoopDevice loop(dir_.file("loop.img"), 80 * kMiB);
  if (!loop.ok()) GTEST_SKIP() << "needs root and losetup";
  auto o = Opts();
  o.data_paths = {loop.path()};
  Status refused = NvmeTier::Open(o).status();
  EXPECT_EQ(refused.code(), StatusCode::kCorruption) << refused.ToString();
  o.cold_start = true;
  std::vector<Extent> extents;
  {
    auto tier = OpenTier(o);
    ASSERT_NE(tier, nullptr);
    EXPECT_TRUE(tier->data_file().block_device());
    for (uint64_t i = 0; i < 5; ++i) extents.push_back(Put(*tier, i, 2 * kMiB + 100));
  }
  o.cold_start = false;
  auto tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  auto rec = tier->TakeRecovered();
  ASSERT_EQ(rec.size(), 5u);
  for (const auto& b : rec) EXPECT_TRUE(ReadsBack(*tier, b.extent, b.key.high));
  tier.reset();
  o.capacity_bytes = 32 * kMiB;  // another capacity: refused, not silently reformatted
  EXPECT_EQ(NvmeTier::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.keep_formatted_capacity = true;  // nvme.bytes: auto: the device keeps its size and blocks
  {
    auto kept = OpenTier(o);
    ASSERT_NE(kept, nullptr);
    EXPECT_EQ(kept->Stats().capacity_bytes, 64 * kMiB);
    EXPECT_EQ(kept->TakeRecovered().size(), 5u);
  }
  o.keep_formatted_capacity = false;
  o.capacity_bytes = 128 * kMiB;  // larger than the device
  o.cold_start = true;
  Status too_big = NvmeTier::Open(o).status();
  EXPECT_EQ(too_big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.message().find(loop.path()), std::string::npos) << too_big.message();
}

TEST_P(NvmeTierTest, CapacityAccountingIsExact) {
  auto tier = OpenTier(Opts(10 * ExtentFootprint(2 * kMiB)));
  std::vector<Extent> e;
  for (uint64_t i = 0; i < 10; ++i) e.push_back(Put(*tier, i, 2 * kMiB));
  EXPECT_EQ(tier->Allocate(2 * kMiB).status().code(), StatusCode::kBusy);
  EXPECT_EQ(tier->Allocate(64 * kMiB).status().code(), StatusCode::kRejected);
  TierStats s = tier->Stats();
  EXPECT_EQ(s.used_bytes, 20 * kMiB);
  EXPECT_EQ(s.reserved_bytes, s.capacity_bytes);
  tier->Free(e[5]);
  tier->Free(e[5]);  // a caller bug, counted, harmless
  EXPECT_EQ(tier->invalid_free_count(), 1u);
  EXPECT_TRUE(tier->Allocate(2 * kMiB).ok());
}

// device bytes written / payload bytes admitted for 2 MiB blocks (DESIGN target <= 1.10).
TEST_P(NvmeTierTest, WriteAmplificationOf2MiBBlocksIsLow) {
  auto tier = OpenTier(Opts(64 * kMiB));
  std::vector<Extent> live;
  for (uint64_t i = 0; i < 200; ++i) {  // churn: the tier fills, then frees the oldest
    if (live.size() == 25) {
      tier->Free(live.front());
      live.erase(live.begin());
    }
    live.push_back(Put(*tier, i, 2 * kMiB));
  }
  double wa = tier->nvme_stats().write_amplification();
  std::printf("nvme_write_amplification %.4f\n", wa);
  EXPECT_LE(wa, 1.10);
  EXPECT_GE(wa, 1.0);
}

TEST_P(NvmeTierTest, RegisteredRegionBuffersGoStraightToTheDevice) {
  AlignedBuffer arena(16 * kMiB);
  auto o = Opts();
  o.registered_region = arena.data();
  o.registered_region_bytes = arena.size();
  auto tier = OpenTier(o);
  Extent e = *tier->Allocate(2 * kMiB);
  std::span<std::byte> slot(arena.data() + 4 * kMiB, 2 * kMiB);
  Fill(slot, 3);
  ASSERT_TRUE(tier->WriteBlock(e, Id(3), slot).ok());
  std::span<std::byte> other(arena.data() + 8 * kMiB, 2 * kMiB);
  ASSERT_TRUE(tier->ReadBlock(e, Id(3), other).ok());
  EXPECT_EQ(std::memcmp(slot.data(), other.data(), slot.size()), 0);
  if (GetParam() == IoBackendKind::kIoUring) {
    EXPECT_EQ(tier->nvme_stats().fixed_buffer_requests, 2u);  // payload out and in
  }
}

TEST_P(NvmeTierTest, ConcurrentWritersAndReaders) {
  auto tier = OpenTier(Opts(128 * kMiB));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t round = 0; round < 25; ++round) {
        uint64_t i = t * 1000 + round;
        Extent e = Put(*tier, i, 300 * 1024 + 11);
        if (!ReadsBack(*tier, e, i)) ++failures;
        tier->Free(e);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(tier->Stats().block_count, 0u);
}

TEST(NvmeStatsTest, VisitorNamesEveryFieldOnce) {
  NvmeStats s;
  s.bytes_admitted = 100;
  s.device_bytes_written = 110;
  s.checksum_failures = 3;
  std::map<std::string, double> seen;
  VisitNvmeStats(s, [&](std::string_view name, double v) {
    EXPECT_TRUE(seen.emplace(std::string(name), v).second) << name;
  });
  EXPECT_EQ(seen.size(), 20u);
  EXPECT_DOUBLE_EQ(seen["write_amplification"], 1.1);
  EXPECT_DOUBLE_EQ(seen["checksum_failures"], 3);
}

TEST(NvmeTierOptionsTest, BadOptionsAreNamed) {
  NvmeTier::Options o;
  o.capacity_bytes = kMiB;
  EXPECT_NE(NvmeTier::Open(o).status().message().find("data_dir"), std::string::npos);
  o.data_dir = "/tmp/unused";
  o.capacity_bytes = 10;
  EXPECT_NE(NvmeTier::Open(o).status().message().find("capacity_bytes"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::tiers::nvme
