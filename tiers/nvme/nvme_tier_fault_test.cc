// Fault and crash-safety tests of NvmeTier: injected I/O errors, emulated power cuts, bit flips.
// The rule under test everywhere: every call completes with success or a typed error, and a block
// that reads back OK has exactly the bytes that were written for it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <random>
#include <set>

#include "tiers/nvme/aligned_buffer.h"
#include "tiers/nvme/nvme_tier.h"
#include "tiers/nvme/testing/fault_injector.h"
#include "tiers/nvme/testing/open_tier.h"
#include "tiers/nvme/testing/power_cut.h"
#include "tiers/nvme/testing/temp_dir.h"

namespace kvtier::tiers::nvme {
namespace {

using testing::Fault;
using testing::FaultInjector;
using testing::MustOpen;

constexpr uint64_t kMiB = 1 << 20;

BlockIdentity Id(uint64_t i) { return {NamespaceId{{3, 4}}, BlockKey{{i, i ^ 0x5555}}}; }

void Fill(std::span<std::byte> out, uint64_t i) {
  std::mt19937_64 rng(i * 7919 + 13);
  for (size_t k = 0; k < out.size(); k += 8) {
    uint64_t v = rng();
    std::memcpy(out.data() + k, &v, std::min<size_t>(8, out.size() - k));
  }
}

bool IsTyped(StatusCode c) {
  return c == StatusCode::kOk || c == StatusCode::kDeviceError ||
         c == StatusCode::kChecksumMismatch;
}

NvmeTier::Options Opts(const std::string& dir, IoBackendKind kind = IoBackendKind::kAuto) {
  NvmeTier::Options o;
  o.data_dir = dir;
  o.capacity_bytes = 64 * kMiB;
  o.io.kind = kind;
  o.io.queue_depth = 8;
  return o;
}

// Reads block `i` at `e`: OK with the right bytes, or an error; never OK with wrong bytes.
StatusCode ReadAndCheck(NvmeTier& tier, const Extent& e, uint64_t i) {
  AlignedBuffer got(e.length), want(e.length);
  Fill(want.span(), i);
  Status st = tier.ReadBlock(e, Id(i), got.span());
  if (st.ok()) {
    EXPECT_EQ(std::memcmp(got.data(), want.data(), e.length), 0) << "block " << i;
  }
  return st.code();
}

// ---------------------------------------------------------------------------------------------
// (a) Injected I/O faults.

struct FaultCase {
  IoBackendKind kind;
  Fault fault;
};

std::string CaseName(const FaultCase& c) {
  static const char* const kFaults[] = {"none", "eio", "enospc", "short", "eagain"};
  return std::string(IoBackendKindName(c.kind)) + "_" + kFaults[static_cast<int>(c.fault)];
}

class NvmeTierFaultTest : public ::testing::TestWithParam<FaultCase> {};

// Random writes, reads and frees with a fault rate of 20%. Runs under a deadline: a hang fails.
TEST_P(NvmeTierFaultTest, EveryCallCompletesWithSuccessOrATypedError) {
  testing::TempDir dir;
  auto faults = std::make_shared<FaultInjector>();
  NvmeTier::Options o = Opts(dir.path(), GetParam().kind);
  o.io.fault_filter = faults;
  auto opened = NvmeTier::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  NvmeTier& tier = **opened;
  faults->Set({.fault = GetParam().fault, .rate = 0.2, .seed = 17});
  auto run = std::async(std::launch::async, [&] {
    std::mt19937_64 rng(5);
    std::map<uint64_t, Extent> live;
    uint64_t failed = 0;
    for (uint64_t step = 0; step < 300; ++step) {
      uint64_t what = rng() % 3;
      if (what == 0 || live.empty()) {
        auto e = tier.Allocate(4096 * (1 + rng() % 32) + rng() % 4096);
        if (!e.ok()) continue;
        AlignedBuffer buf(e->length);
        Fill(buf.span(), step);
        Status st = tier.WriteBlock(*e, Id(step), buf.span());
        EXPECT_TRUE(IsTyped(st.code())) << st.ToString();
        if (st.ok())
          live[step] = *e;
        else {
          ++failed;
          tier.Free(*e);
        }
      } else if (what == 1) {
        auto it = std::next(live.begin(), rng() % live.size());
        StatusCode c = ReadAndCheck(tier, it->second, it->first);
        EXPECT_TRUE(IsTyped(c));
        if (c != StatusCode::kOk) ++failed;
      } else {
        auto it = std::next(live.begin(), rng() % live.size());
        tier.Free(it->second);
        live.erase(it);
      }
    }
    faults->Set({});
    for (const auto& [i, e] : live) EXPECT_EQ(ReadAndCheck(tier, e, i), StatusCode::kOk);
    return failed;
  });
  ASSERT_EQ(run.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "I/O hung";
  uint64_t failed = run.get();
  NvmeStats s = tier.nvme_stats();
  bool hard = GetParam().fault == Fault::kEio || GetParam().fault == Fault::kEnospc;
  EXPECT_GT(faults->injected(), 0u);
  EXPECT_EQ(failed > 0, hard);
  EXPECT_EQ(s.io_errors, failed);
  EXPECT_EQ(s.checksum_failures, 0u);
  EXPECT_EQ(s.in_flight, 0u);
}

INSTANTIATE_TEST_SUITE_P(Faults, NvmeTierFaultTest,
                         ::testing::Values(FaultCase{IoBackendKind::kIoUring, Fault::kEio},
                                           FaultCase{IoBackendKind::kIoUring, Fault::kEnospc},
                                           FaultCase{IoBackendKind::kIoUring, Fault::kShort},
                                           FaultCase{IoBackendKind::kIoUring, Fault::kEagain},
                                           FaultCase{IoBackendKind::kThreads, Fault::kEio},
                                           FaultCase{IoBackendKind::kThreads, Fault::kEnospc},
                                           FaultCase{IoBackendKind::kThreads, Fault::kShort},
                                           FaultCase{IoBackendKind::kThreads, Fault::kEagain}),
                         [](const auto& info) { return CaseName(info.param); });

TEST(NvmeTierRecoveryFaultTest, OpenReadsNoDataAndAnUnreadableBlockFailsOnlyItsOwnRead) {
  testing::TempDir dir;
  std::map<uint64_t, Extent> written;
  {
    auto tier = MustOpen(Opts(dir.path()));
    for (uint64_t i = 0; i < 5; ++i) {
      Extent e = *tier->Allocate(8192);
      AlignedBuffer buf(8192);
      Fill(buf.span(), i);
      ASSERT_TRUE(tier->WriteBlock(e, Id(i), buf.span()).ok());
      written[i] = e;
    }
  }
  // The first read completion fails: an open that read anything from the data file would meet it
  // and drop a block.
  auto faults = std::make_shared<FaultInjector>(
      testing::FaultRule{.fault = Fault::kEio, .writes = false, .nth = 1});
  NvmeTier::Options o = Opts(dir.path());
  o.io.fault_filter = faults;
  auto tier = MustOpen(o);
  EXPECT_EQ(tier->TakeRecovered().size(), 5u);
  EXPECT_EQ(tier->nvme_stats().dropped_at_recovery, 0u);
  // The first read meets the fault (a device error: the block stays); the others read back.
  EXPECT_EQ(ReadAndCheck(*tier, written[0], 0), StatusCode::kDeviceError);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(ReadAndCheck(*tier, written[i], i), StatusCode::kOk);
}

// ---------------------------------------------------------------------------------------------
// (b) Power cuts: data and catalog lose what was not synced.

struct Live {
  Extent extent;
  bool synced;  // live and unchanged since the last successful Sync()
};

// One run: random writes, frees, syncs and catalog flushes, then a power cut and a reopen.
void PowerCutRun(uint64_t seed, testing::RevertMode mode, IoBackendKind kind, int files = 1) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::TempDir dir;
  auto fs = std::make_shared<testing::DropUnsyncedFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  auto journal = std::make_shared<testing::PowerCutJournal>();
  NvmeTier::Options o = Opts(dir.path(), kind);
  o.capacity_bytes = 16 * kMiB;  // small, so freed extents are reused
  for (int f = 0; f < files && files > 1; ++f) {
    o.data_paths.push_back(dir.file("data-" + std::to_string(f)));
  }
  o.catalog_env = env.get();
  std::map<uint64_t, Live> live;
  std::mt19937_64 rng(seed);
  {
    auto backend = MakeIoBackend(o.io);
    ASSERT_TRUE(backend.ok());
    auto opened = NvmeTier::Open(
        o, std::make_unique<testing::PowerCutBackend>(std::move(backend).value(), journal));
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    NvmeTier& tier = **opened;
    for (uint64_t step = 0; step < 120; ++step) {
      uint64_t what = rng() % 10;
      if (what < 5 || live.empty()) {
        auto e = tier.Allocate(4096 * (1 + rng() % 64) + rng() % 2 * 100);
        if (!e.ok()) continue;
        AlignedBuffer buf(e->length);
        Fill(buf.span(), step);
        ASSERT_TRUE(tier.WriteBlock(*e, Id(step), buf.span()).ok());
        live[step] = {*e, false};
      } else if (what < 8) {
        auto it = std::next(live.begin(), rng() % live.size());
        tier.Free(it->second.extent);
        live.erase(it);
      } else if (what == 8) {
        ASSERT_TRUE(tier.Sync().ok());
        for (auto& [i, l] : live) l.synced = true;
      } else {
        // The catalog persists records on its own schedule (memtable flushes), whatever the data.
        ASSERT_TRUE(tier.catalog_for_testing().FlushForTesting().ok());
      }
    }
    journal->Cut();
    fs->Cut();
  }
  journal->Revert(mode, seed);
  fs->Revert();
  o.catalog_env = nullptr;
  auto tier = NvmeTier::Open(o);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  std::set<uint64_t> served;
  for (const RecoveredBlock& b : (*tier)->TakeRecovered()) {
    uint64_t i = b.key.high;
    ASSERT_EQ(Id(i).key, b.key) << "a block that was never written";
    StatusCode c = ReadAndCheck(**tier, b.extent, i);
    ASSERT_TRUE(c == StatusCode::kOk || c == StatusCode::kChecksumMismatch) << int(c);
    if (c == StatusCode::kOk)
      served.insert(i);
    else
      (*tier)->Free(b.extent);  // what the store does with a mismatch
  }
  for (const auto& [i, l] : live) {
    if (l.synced) {
      EXPECT_TRUE(served.count(i)) << "synced block " << i << " was lost";
    }
  }
  uint64_t kept = served.size();
  tier->reset();
  // A second restart finds a consistent catalog: nothing more to drop.
  auto again = NvmeTier::Open(o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->TakeRecovered().size(), kept);
  EXPECT_EQ((*again)->nvme_stats().dropped_at_recovery, 0u);
}

TEST(NvmeTierPowerCutTest, UnsyncedDataIsDroppedNeverServed) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    PowerCutRun(seed, testing::RevertMode::kRandom, IoBackendKind::kIoUring);
  }
}

TEST(NvmeTierPowerCutTest, EverythingUnsyncedLost) {
  for (uint64_t seed = 21; seed <= 26; ++seed) {
    PowerCutRun(seed, testing::RevertMode::kAll, IoBackendKind::kIoUring);
  }
}

TEST(NvmeTierPowerCutTest, SeveralDataFiles) {
  for (uint64_t seed = 41; seed <= 46; ++seed) {
    PowerCutRun(seed, testing::RevertMode::kRandom, IoBackendKind::kIoUring, 3);
  }
}

TEST(NvmeTierPowerCutTest, ThreadBackendToo) {
  for (uint64_t seed = 31; seed <= 36; ++seed) {
    PowerCutRun(seed, testing::RevertMode::kRandom, IoBackendKind::kThreads);
  }
}

// A block the catalog cannot record is served until the restart and gone after it; a copy that
// must survive a restart (a write-through copy, acknowledged as durable) fails instead of being
// kept so.
TEST(NvmeTierCatalogFaultTest, ABlockTheCatalogCannotRecordIsNotKeptAcrossARestart) {
  testing::TempDir dir;
  auto fs = std::make_shared<testing::DropUnsyncedFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  NvmeTier::Options o = Opts(dir.path());
  o.catalog_env = env.get();
  Extent recorded;
  {
    auto opened = NvmeTier::Open(o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    NvmeTier& tier = **opened;
    AlignedBuffer buf(8192);
    AlignedBuffer got(8192);
    recorded = *tier.Allocate(buf.size());
    Fill(buf.span(), 1);
    ASSERT_TRUE(tier.WriteBlock(recorded, Id(1), buf.span()).ok());
    ASSERT_TRUE(tier.Sync().ok());
    fs->Cut();  // the catalog's log refuses every write from now on

    // A demotion's block: kept unrecorded, served in this run.
    const Extent unrecorded = *tier.Allocate(buf.size());
    Fill(buf.span(), 2);
    EXPECT_TRUE(tier.WriteBlock(unrecorded, Id(2), buf.span()).ok());
    EXPECT_TRUE(tier.ReadBlock(unrecorded, Id(2), got.span()).ok());
    EXPECT_EQ(std::memcmp(got.data(), buf.data(), buf.size()), 0);
    // Write-through copies: failed, not kept.
    std::vector<BlockWrite> batch;
    std::vector<AlignedBuffer> sources;
    for (uint64_t i = 3; i < 5; ++i) {
      sources.emplace_back(8192);
      Fill(sources.back().span(), i);
      batch.push_back({*tier.Allocate(8192), Id(i), sources.back().span(), {}, true});
    }
    tier.WriteBlocks(batch);
    for (const BlockWrite& w : batch) {
      EXPECT_EQ(w.status.code(), StatusCode::kDeviceError);
      EXPECT_EQ(tier.ReadBlock(w.extent, w.identity, got.span()).code(), StatusCode::kNotFound);
    }
    EXPECT_EQ(tier.nvme_stats().catalog_errors, 3u);
    EXPECT_TRUE(tier.ReadBlock(recorded, Id(1), got.span()).ok()) << "recorded before: kept";
    // Freeing the unrecorded block deletes no record (it has none).
    tier.Free(unrecorded);
  }
  fs->Revert();
  o.catalog_env = nullptr;
  auto reopened = NvmeTier::Open(o);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  const std::vector<RecoveredBlock> recovered = (*reopened)->TakeRecovered();
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0].extent.offset, recorded.offset);
}

// A block freed while the catalog refuses to delete its record leaves the record naming an extent
// that the allocator hands out again. The block written there next must not be recorded beside
// it: a restart would find two records over one extent, keep the first in key order and drop the
// other, and the stale one could win over the block that is really there. Both key orders run.
TEST(NvmeTierCatalogFaultTest, ARecordWhoseDeleteFailedNeverSharesItsExtentAtARestart) {
  for (const auto& [freed, rewritten] : {std::pair<uint64_t, uint64_t>{1, 2}, {2, 1}}) {
    SCOPED_TRACE("freed " + std::to_string(freed));
    testing::TempDir dir;
    const NvmeTier::Options o = Opts(dir.path());
    Extent reused;
    {
      auto tier = MustOpen(o);
      AlignedBuffer buf(8192);
      const Extent e = *tier->Allocate(buf.size());
      Fill(buf.span(), freed);
      ASSERT_TRUE(tier->WriteBlock(e, Id(freed), buf.span()).ok());
      tier->catalog_for_testing().FailWritesForTesting(1);
      tier->Free(e);
      EXPECT_EQ(tier->nvme_stats().catalog_errors, 1u);
      reused = *tier->Allocate(buf.size());
      ASSERT_EQ(reused.offset, e.offset);
      Fill(buf.span(), rewritten);
      ASSERT_TRUE(tier->WriteBlock(reused, Id(rewritten), buf.span()).ok());
      EXPECT_TRUE(tier->MustSurviveRestart(reused).ok());
    }
    auto tier = MustOpen(o);
    const std::vector<RecoveredBlock> recovered = tier->TakeRecovered();
    ASSERT_EQ(recovered.size(), 1u);
    EXPECT_EQ(recovered[0].key, Id(rewritten).key);
    EXPECT_EQ(ReadAndCheck(*tier, reused, rewritten), StatusCode::kOk);
    EXPECT_EQ(tier->nvme_stats().dropped_at_recovery, 0u);
  }
}

// The delete that failed is retried (here by the next Sync), so a freed block does not come back
// at the restart once the catalog works again.
TEST(NvmeTierCatalogFaultTest, AFailedDeleteIsRetriedOnceTheCatalogWorksAgain) {
  testing::TempDir dir;
  const NvmeTier::Options o = Opts(dir.path());
  Extent kept;
  {
    auto tier = MustOpen(o);
    AlignedBuffer buf(8192);
    const Extent freed = *tier->Allocate(buf.size());
    Fill(buf.span(), 1);
    ASSERT_TRUE(tier->WriteBlock(freed, Id(1), buf.span()).ok());
    kept = *tier->Allocate(buf.size());
    Fill(buf.span(), 2);
    ASSERT_TRUE(tier->WriteBlock(kept, Id(2), buf.span()).ok());
    tier->catalog_for_testing().FailWritesForTesting(1);
    tier->Free(freed);
    ASSERT_TRUE(tier->Sync().ok());
    // The close would retry the delete too: only Sync's retry is under test.
    tier->catalog_for_testing().FailWritesForTesting(1000);
  }
  auto tier = MustOpen(o);
  const std::vector<RecoveredBlock> recovered = tier->TakeRecovered();
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0].extent, kept);
}

// While the catalog keeps refusing, a block written over the extent of an undeleted record is
// served in this run and not recorded: the stale record's block is a miss after the restart, and
// nothing it overlaps is lost.
TEST(NvmeTierCatalogFaultTest, WhileTheDeleteKeepsFailingTheExtentsNextBlockIsNotRecorded) {
  testing::TempDir dir;
  const NvmeTier::Options o = Opts(dir.path());
  Extent reused;
  {
    auto tier = MustOpen(o);
    AlignedBuffer buf(8192), got(8192);
    const Extent e = *tier->Allocate(buf.size());
    Fill(buf.span(), 1);
    ASSERT_TRUE(tier->WriteBlock(e, Id(1), buf.span()).ok());
    tier->catalog_for_testing().FailWritesForTesting(2);  // the delete and its first retry
    tier->Free(e);
    reused = *tier->Allocate(buf.size());
    ASSERT_EQ(reused.offset, e.offset);
    Fill(buf.span(), 2);
    ASSERT_TRUE(tier->WriteBlock(reused, Id(2), buf.span()).ok());
    EXPECT_EQ(tier->MustSurviveRestart(reused).code(), StatusCode::kDeviceError);
    EXPECT_EQ(ReadAndCheck(*tier, reused, 2), StatusCode::kOk);
    // Still failing at the close, as after a crash: the stale record is what the restart finds.
    tier->catalog_for_testing().FailWritesForTesting(1000);
  }
  auto tier = MustOpen(o);
  const std::vector<RecoveredBlock> recovered = tier->TakeRecovered();
  ASSERT_EQ(recovered.size(), 1u);  // the stale record
  for (const RecoveredBlock& b : recovered) {
    EXPECT_EQ(ReadAndCheck(*tier, b.extent, b.key.high), StatusCode::kChecksumMismatch);
  }
}

// Three copies of one block on NVMe; the newest holds the record. Freed, it passes the record to
// an older copy. When that put fails, the next copy is tried: the copy left `durable` (the one
// MustSurviveRestart vouches for) must be the one the record names, and the copy whose put
// failed must not be vouched for.
TEST(NvmeTierCatalogFaultTest, AFailedPassOfTheRecordTriesTheNextCopy) {
  testing::TempDir dir;
  const NvmeTier::Options o = Opts(dir.path());
  std::vector<Extent> copies;
  Extent survivor;
  {
    auto tier = MustOpen(o);
    AlignedBuffer buf(8192);
    Fill(buf.span(), 1);
    for (int c = 0; c < 3; ++c) {
      copies.push_back(*tier->Allocate(buf.size()));
      ASSERT_TRUE(tier->WriteBlock(copies.back(), Id(1), buf.span()).ok());
    }
    tier->catalog_for_testing().FailWritesForTesting(1);  // the put for the first older copy
    tier->Free(copies[2]);
    EXPECT_EQ(tier->nvme_stats().catalog_errors, 1u);
    // Both older copies still serve reads in this run; one of them, not both, is vouched for.
    std::vector<Extent> vouched;
    for (int c = 0; c < 2; ++c) {
      EXPECT_EQ(ReadAndCheck(*tier, copies[c], 1), StatusCode::kOk);
      if (tier->MustSurviveRestart(copies[c]).ok()) vouched.push_back(copies[c]);
    }
    ASSERT_EQ(vouched.size(), 1u);
    survivor = vouched[0];
  }
  auto tier = MustOpen(o);
  const std::vector<RecoveredBlock> recovered = tier->TakeRecovered();
  ASSERT_EQ(recovered.size(), 1u) << "the copy vouched for comes back";
  EXPECT_EQ(recovered[0].extent, survivor);
  EXPECT_EQ(ReadAndCheck(*tier, survivor, 1), StatusCode::kOk);
}

// A Free's delete that RocksDB would stall is not waited for: it is put off, not an error, and the
// next Sync does it, so the freed block does not come back at the restart.
TEST(NvmeTierCatalogStallTest, AFreeDuringAStallPutsItsDeleteOffToTheNextSync) {
  testing::TempDir dir;
  const NvmeTier::Options o = Opts(dir.path());
  {
    auto tier = MustOpen(o);
    AlignedBuffer buf(8192);
    const Extent e = *tier->Allocate(buf.size());
    Fill(buf.span(), 1);
    ASSERT_TRUE(tier->WriteBlock(e, Id(1), buf.span()).ok());
    tier->catalog_for_testing().StallWritesForTesting(1);
    tier->Free(e);
    EXPECT_EQ(tier->nvme_stats().catalog_deletes_deferred, 1u);
    EXPECT_EQ(tier->nvme_stats().catalog_errors, 0u);
    EXPECT_EQ(tier->catalog_for_testing().Load()->records.size(), 1u);  // still there
    // Counted where the sync schedule looks, so that a Sync comes for it.
    EXPECT_EQ(tier->unsynced_writes().acknowledged, 1u);
    ASSERT_TRUE(tier->Sync().ok());
    EXPECT_TRUE(tier->catalog_for_testing().Load()->records.empty());
    EXPECT_EQ(tier->unsynced_writes().acknowledged, 0u);
  }
  EXPECT_TRUE(MustOpen(o)->TakeRecovered().empty());
}

// Deletes put off by a stall, whose count brings the next Sync; that Sync's retry fails the first
// of them outright. The one behind it must still be done by that Sync, which takes its count:
// left undone, no Sync would come for it while the tier writes and frees nothing.
TEST(NvmeTierCatalogStallTest, ADeleteThatFailsDoesNotKeepTheSyncFromThoseBehindIt) {
  testing::TempDir dir;
  const NvmeTier::Options o = Opts(dir.path());
  {
    auto tier = MustOpen(o);
    AlignedBuffer buf(8192);
    std::vector<Extent> freed;
    for (uint64_t i = 1; i <= 2; ++i) {
      freed.push_back(*tier->Allocate(buf.size()));
      Fill(buf.span(), i);
      ASSERT_TRUE(tier->WriteBlock(freed.back(), Id(i), buf.span()).ok());
    }
    tier->catalog_for_testing().StallWritesForTesting(1000);
    for (const Extent& e : freed) tier->Free(e);
    tier->catalog_for_testing().StallWritesForTesting(0);
    EXPECT_EQ(tier->unsynced_writes().acknowledged, 2u);
    tier->catalog_for_testing().FailWritesForTesting(1);  // the retry's first delete
    ASSERT_TRUE(tier->Sync().ok());
    const auto left = tier->catalog_for_testing().Load();
    ASSERT_TRUE(left.ok());
    ASSERT_EQ(left->records.size(), 1u) << "the delete behind the failed one is done";
    EXPECT_EQ(left->records[0].key, Id(1).key);
    EXPECT_EQ(tier->nvme_stats().catalog_errors, 1u);  // put off first, then failed: once
    EXPECT_EQ(tier->unsynced_writes().acknowledged, 0u);
    // The failed one is retried like any failed delete: here by the next Sync.
    ASSERT_TRUE(tier->Sync().ok());
    EXPECT_TRUE(tier->catalog_for_testing().Load()->records.empty());
    // The close would retry the deletes too: only the Syncs are under test.
    tier->catalog_for_testing().FailWritesForTesting(1000);
  }
  EXPECT_TRUE(MustOpen(o)->TakeRecovered().empty());
}

// Unlike a delete that failed, one put off by a stall does not keep the extent's next block from
// its record: the put waits the stall out, deleting the old record first.
TEST(NvmeTierCatalogStallTest, ABlockWrittenOverAPutOffDeleteIsRecorded) {
  testing::TempDir dir;
  const NvmeTier::Options o = Opts(dir.path());
  Extent reused;
  {
    auto tier = MustOpen(o);
    AlignedBuffer buf(8192);
    const Extent e = *tier->Allocate(buf.size());
    Fill(buf.span(), 1);
    ASSERT_TRUE(tier->WriteBlock(e, Id(1), buf.span()).ok());
    tier->catalog_for_testing().StallWritesForTesting(1);
    tier->Free(e);
    reused = *tier->Allocate(buf.size());
    ASSERT_EQ(reused.offset, e.offset);
    Fill(buf.span(), 2);
    ASSERT_TRUE(tier->WriteBlock(reused, Id(2), buf.span()).ok());
    EXPECT_TRUE(tier->MustSurviveRestart(reused).ok());
  }
  auto tier = MustOpen(o);
  const std::vector<RecoveredBlock> recovered = tier->TakeRecovered();
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0].key, Id(2).key);
  EXPECT_EQ(ReadAndCheck(*tier, recovered[0].extent, 2), StatusCode::kOk);
}

// A rewrite of an extent that fails on the device leaves no block there (WriteBlock: free the
// extent), and no record either: the one of the block the extent held must not outlive the Free
// and bring that block back at the restart.
TEST(NvmeTierRewriteFaultTest, AFailedRewriteLeavesNoRecordOfTheBlockTheExtentHeld) {
  testing::TempDir dir;
  auto faults = std::make_shared<FaultInjector>();
  NvmeTier::Options o = Opts(dir.path());
  o.io.fault_filter = faults;
  {
    auto tier = MustOpen(o);
    AlignedBuffer buf(8192);
    Fill(buf.span(), 1);
    const Extent e = *tier->Allocate(buf.size());
    ASSERT_TRUE(tier->WriteBlock(e, Id(1), buf.span()).ok());
    faults->Set({.fault = Fault::kEio, .reads = false, .nth = 1});
    EXPECT_EQ(tier->WriteBlock(e, Id(1), buf.span()).code(), StatusCode::kDeviceError);
    EXPECT_EQ(tier->MustSurviveRestart(e).code(), StatusCode::kNotFound);
    tier->Free(e);
  }
  o.io.fault_filter = nullptr;
  auto tier = MustOpen(o);
  EXPECT_TRUE(tier->TakeRecovered().empty());
}

// A read's refresh of its block's record comes after the read. If the block was freed meanwhile
// (a lease that lapsed mid-read) and another of the same key written into its extent, the record
// used to get the old block's size and checksum, and the new block failed its header check at the
// restart: gone, though written and recorded. The refresh now leaves a record it is not the
// block of.
class ReadHeldAtItsCompletion final : public CompletionFilter {
 public:
  int64_t Filter(const IoRequest& request, int64_t result) override {
    if (request.op == IoOp::kRead && armed.exchange(false)) {
      reached.set_value();
      go.wait_for(std::chrono::seconds(10));
    }
    return result;
  }
  std::atomic<bool> armed{false};
  std::promise<void> reached;
  std::promise<void> release;
  std::shared_future<void> go = release.get_future().share();
};

TEST(NvmeTierRecordRefreshTest, ARefreshAfterAReadNeverRecordsTheOldBlockOverANewOne) {
  testing::TempDir dir;
  auto held = std::make_shared<ReadHeldAtItsCompletion>();
  NvmeTier::Options o = Opts(dir.path(), IoBackendKind::kThreads);
  o.io.fault_filter = held;
  constexpr size_t kBytes = 8192;
  AlignedBuffer v1(kBytes), v2(kBytes);
  Fill(v1.span(), 1);
  Fill(v2.span(), 2);
  Extent e;
  {
    auto tier = MustOpen(o);
    e = *tier->Allocate(kBytes);
    ASSERT_TRUE(tier->WriteBlock(e, Id(1), v1.span()).ok());
    held->armed = true;
    AlignedBuffer got(kBytes);
    auto read =
        std::async(std::launch::async, [&] { return tier->ReadBlock(e, Id(1), got.span()); });
    ASSERT_EQ(held->reached.get_future().wait_for(std::chrono::seconds(10)),
              std::future_status::ready);
    tier->Free(e);
    const Extent again = *tier->Allocate(kBytes);
    ASSERT_EQ(again, e);  // best fit, lowest offset first: the same extent
    ASSERT_TRUE(tier->WriteBlock(again, Id(1), v2.span()).ok());
    held->release.set_value();
    ASSERT_TRUE(read.get().ok());  // its bytes were in before the free: the old block, whole
    EXPECT_EQ(std::memcmp(got.data(), v1.data(), kBytes), 0);
  }
  o.io.fault_filter = nullptr;
  auto tier = MustOpen(o);
  EXPECT_EQ(tier->TakeRecovered().size(), 1u);
  AlignedBuffer got(kBytes);
  ASSERT_TRUE(tier->ReadBlock(e, Id(1), got.span()).ok());
  EXPECT_EQ(std::memcmp(got.data(), v2.data(), kBytes), 0);
}

// ---------------------------------------------------------------------------------------------
// (c) Bit flips in payloads, record headers and catalog values: all detected.

class NvmeTierBitFlipTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kBlocks = 32;
  static constexpr uint64_t kBytes = 64 * 1024 + 321;

  void WriteBlocks() {
    auto tier = MustOpen(Opts(dir_.path()));
    for (uint64_t i = 0; i < kBlocks; ++i) {
      Extent e = *tier->Allocate(kBytes);
      AlignedBuffer buf(kBytes);
      Fill(buf.span(), i);
      ASSERT_TRUE(tier->WriteBlock(e, Id(i), buf.span()).ok());
      extents_[i] = e;
    }
    data_offset_ = tier->data_file().data_offset();
  }
  // Flips one bit at byte `offset` of the data file.
  void FlipFileBit(uint64_t offset, int bit) {
    int fd = ::open((dir_.path() + "/" + std::string(NvmeTier::kDataFileName)).c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    unsigned char c = 0;
    ASSERT_EQ(::pread(fd, &c, 1, offset), 1);
    c ^= static_cast<unsigned char>(1 << bit);
    ASSERT_EQ(::pwrite(fd, &c, 1, offset), 1);
    ::fsync(fd);
    ::close(fd);
  }

  testing::TempDir dir_;
  std::map<uint64_t, Extent> extents_;
  uint64_t data_offset_ = 0;
};

TEST_F(NvmeTierBitFlipTest, PayloadFlipsAreChecksumMismatches) {
  WriteBlocks();
  std::mt19937_64 rng(99);
  for (int round = 0; round < 4; ++round) {
    for (auto& [i, e] : extents_) {
      uint64_t pos = rng() % kBytes;
      FlipFileBit(data_offset_ + e.offset + kRecordHeaderBytes + pos, rng() % 8);
    }
    auto tier = MustOpen(Opts(dir_.path()));
    ASSERT_EQ(tier->TakeRecovered().size(), kBlocks);  // headers are intact
    for (auto& [i, e] : extents_) {
      EXPECT_EQ(ReadAndCheck(*tier, e, i), StatusCode::kChecksumMismatch) << "block " << i;
    }
    EXPECT_EQ(tier->nvme_stats().checksum_failures, kBlocks);
    // Flip them back for the next round (each flip is its own inverse): re-read to be sure.
  }
}

TEST_F(NvmeTierBitFlipTest, RecordHeaderFlipsAreChecksumMismatchesOnTheFirstRead) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 4; ++round) {
    extents_.clear();
    WriteBlocks();
    for (auto& [i, e] : extents_) {
      FlipFileBit(data_offset_ + e.offset + rng() % kRecordHeaderBytes, rng() % 8);
    }
    // The open does not read the headers; the first read of each block does, and refuses it.
    auto tier = MustOpen(Opts(dir_.path()));
    EXPECT_EQ(tier->TakeRecovered().size(), kBlocks);
    for (auto& [i, e] : extents_) {
      EXPECT_EQ(ReadAndCheck(*tier, e, i), StatusCode::kChecksumMismatch) << "block " << i;
    }
    EXPECT_EQ(tier->nvme_stats().checksum_failures, kBlocks);
  }
}

TEST_F(NvmeTierBitFlipTest, CatalogValueAndKeyFlipsDropTheRecordAtOpen) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 4; ++round) {
    extents_.clear();
    WriteBlocks();
    {
      rocksdb::DB* raw = nullptr;
      ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.path() + "/catalog", &raw).ok());
      std::unique_ptr<rocksdb::DB> db(raw);
      std::vector<std::pair<std::string, std::string>> entries;
      std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
      for (it->Seek("b"); it->Valid() && it->key()[0] == 'b'; it->Next()) {
        entries.emplace_back(it->key().ToString(), it->value().ToString());
      }
      ASSERT_EQ(entries.size(), kBlocks);
      for (auto& [key, value] : entries) {
        bool flip_key = rng() % 4 == 0;
        std::string& target = flip_key ? key : value;
        size_t pos = flip_key ? 1 + rng() % (target.size() - 1) : rng() % target.size();
        if (flip_key) {
          ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), key).ok());
        }
        target[pos] = static_cast<char>(target[pos] ^ (1 << (rng() % 8)));
        ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
      }
    }
    auto tier = MustOpen(Opts(dir_.path()));
    EXPECT_TRUE(tier->TakeRecovered().empty());
    EXPECT_EQ(tier->nvme_stats().dropped_at_recovery, kBlocks);
  }
}

}  // namespace
}  // namespace kvtier::tiers::nvme
