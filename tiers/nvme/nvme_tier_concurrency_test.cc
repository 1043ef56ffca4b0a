// NvmeTier under concurrent writes and frees, with catalog writes that stall or hang: a Free
// (a DEL or DROP on a network thread) never waits for another thread's catalog write, and the
// records come out right all the same. Also run under ThreadSanitizer (label "concurrency").
#include <gtest/gtest.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "tiers/nvme/aligned_buffer.h"
#include "tiers/nvme/nvme_tier.h"
#include "tiers/nvme/testing/open_tier.h"
#include "tiers/nvme/testing/temp_dir.h"
#include "tiers/nvme/testing/test_blocks.h"

namespace kvtier::tiers::nvme {
namespace {

using testing::FillTestBlock;
using testing::MustOpen;
using testing::TestBlockId;

constexpr uint64_t kMiB = 1 << 20;

NvmeTier::Options Opts(const std::string& dir) {
  NvmeTier::Options o;
  o.data_dir = dir;
  o.capacity_bytes = 64 * kMiB;
  o.io.queue_depth = 8;
  return o;
}

// A file system whose log appends wait while the gate is closed: a catalog write that hangs the
// way a stalled RocksDB write does, at a point the test chooses.
class GatedLogFs final : public rocksdb::FileSystemWrapper {
 public:
  using FileSystemWrapper::FileSystemWrapper;
  const char* Name() const override { return "GatedLogFs"; }

  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = false;
    }
    cv_.notify_all();
  }
  // Waits until a log append waits at the gate; false after 10 s.
  bool AwaitWaiter() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return waiting_ > 0; });
  }
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !closed_; });
    --waiting_;
  }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(fname, opts, result, dbg);
    if (s.ok() && fname.ends_with(".log"))
      *result = std::make_unique<File>(std::move(*result), this);
    return s;
  }

 private:
  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, GatedLogFs* fs)
        : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
      fs_->Pass();
      return FSWritableFileOwnerWrapper::Append(data, o, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      fs_->Pass();
      return FSWritableFileOwnerWrapper::Append(data, o, info, dbg);
    }

   private:
    GatedLogFs* fs_;
  };

  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
  int waiting_ = 0;
};

// A WriteBlock on another thread whose catalog put hangs (at GatedLogFs's gate) while it holds
// the catalog, from the constructor to Finish() or the destructor. A future that may wait for it
// is declared before this object, so that the gate opens before that future's destructor waits.
class HangingWrite {
 public:
  HangingWrite(NvmeTier& tier, GatedLogFs& fs, const Extent& extent, uint64_t block)
      : fs_(fs), buf_(extent.length) {
    FillTestBlock(buf_.span(), block);
    fs_.Close();
    writer_ = std::async(std::launch::async, [&tier, extent, block, this] {
      return tier.WriteBlock(extent, TestBlockId(block), buf_.span());
    });
    hanging_ = fs_.AwaitWaiter();
    EXPECT_TRUE(hanging_) << "the write never reached the catalog";
  }
  ~HangingWrite() { (void)Finish(); }
  bool hanging() const { return hanging_; }
  // Lets the write go on; its status.
  Status Finish() {
    fs_.Open();
    if (writer_.valid()) status_ = writer_.get();
    return status_;
  }

 private:
  GatedLogFs& fs_;
  AlignedBuffer buf_;
  std::future<Status> writer_;
  bool hanging_ = false;
  Status status_;
};

// The keys (TestBlockId numbers) and extent offsets of the catalog's records, by number.
std::map<uint64_t, uint64_t> Records(NvmeTier& tier) {
  std::map<uint64_t, uint64_t> out;
  const auto loaded = tier.catalog_for_testing().Load();
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  if (loaded.ok()) {
    for (const CatalogRecord& r : loaded->records) out[r.key.high] = r.offset;
  }
  return out;
}

Extent WriteTestBlock(NvmeTier& tier, uint64_t block) {
  AlignedBuffer buf(8192);
  const Extent e = *tier.Allocate(buf.size());
  FillTestBlock(buf.span(), block);
  EXPECT_TRUE(tier.WriteBlock(e, TestBlockId(block), buf.span()).ok());
  return e;
}

struct GatedTier {
  testing::TempDir dir;
  std::shared_ptr<GatedLogFs> fs = std::make_shared<GatedLogFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  NvmeTier::Options options() {
    NvmeTier::Options o = Opts(dir.path());
    o.catalog_env = env.get();
    return o;
  }
};

// A Free on a network thread does not wait for a write whose catalog put hangs: it leaves the
// record's release to that writer, which does it before it lets the catalog go.
TEST(NvmeTierCatalogStallTest, AFreeDoesNotWaitForAHangingCatalogWrite) {
  GatedTier gated;
  Extent kept;
  {
    auto tier = MustOpen(gated.options());
    const Extent freed = WriteTestBlock(*tier, 1);
    kept = *tier->Allocate(8192);
    std::future<void> freeing;
    HangingWrite hanging(*tier, *gated.fs, kept, 2);
    if (!hanging.hanging()) return;
    freeing = std::async(std::launch::async, [&] { tier->Free(freed); });
    EXPECT_EQ(freeing.wait_for(std::chrono::seconds(5)), std::future_status::ready)
        << "Free waited for the hanging catalog write";
    // The release waits for the writer: the freed block's record is still there, the writer's
    // not yet.
    EXPECT_EQ(Records(*tier), (std::map<uint64_t, uint64_t>{{1, freed.offset}}));
    EXPECT_TRUE(hanging.Finish().ok());
    freeing.get();
    EXPECT_EQ(tier->nvme_stats().catalog_deletes_deferred, 0u);
    ASSERT_TRUE(tier->Sync().ok());
    EXPECT_EQ(Records(*tier), (std::map<uint64_t, uint64_t>{{2, kept.offset}}));
  }
  NvmeTier::Options o = gated.options();
  o.catalog_env = nullptr;
  auto tier = MustOpen(o);
  const std::vector<RecoveredBlock> recovered = tier->TakeRecovered();
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0].extent, kept);
}

// The newer of two copies of a block holds the record; freed, it must put the record back for
// the older copy before its extent is reused: a block written there meanwhile, then a kill -9,
// would leave the record naming the new block's extent and the older copy, which may have been
// acknowledged as durable, with none. So that Free waits for the catalog, and the extent is not
// handed out before the record has passed back.
TEST(NvmeTierCatalogStallTest, AFreeWhoseRecordPassesBackWaitsBeforeItsExtentIsReused) {
  GatedTier gated;
  auto tier = MustOpen(gated.options());
  const Extent older = WriteTestBlock(*tier, 1);
  ASSERT_TRUE(tier->MustSurviveRestart(older).ok());
  const Extent newer = WriteTestBlock(*tier, 1);
  ASSERT_EQ(Records(*tier), (std::map<uint64_t, uint64_t>{{1, newer.offset}}));
  const Extent other = *tier->Allocate(8192);
  std::future<void> freeing;
  HangingWrite hanging(*tier, *gated.fs, other, 2);
  if (!hanging.hanging()) return;
  freeing = std::async(std::launch::async, [&] { tier->Free(newer); });
  // Until the Free took the block out, the checks below would prove nothing.
  for (int i = 0; i < 1000 && !tier->BlocksStartingIn(newer)->empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(tier->BlocksStartingIn(newer)->empty()) << "the Free never began";
  EXPECT_EQ(freeing.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout)
      << "Free returned before the record passed back";
  const Result<Extent> next = tier->Allocate(8192);
  ASSERT_TRUE(next.ok());
  EXPECT_NE(next->offset, newer.offset) << "the extent was reused before the record passed back";
  EXPECT_TRUE(hanging.Finish().ok());
  freeing.get();
  EXPECT_EQ(Records(*tier), (std::map<uint64_t, uint64_t>{{1, older.offset}, {2, other.offset}}));
  AlignedBuffer got(8192), want(8192);
  FillTestBlock(want.span(), 1);
  ASSERT_TRUE(tier->ReadBlock(older, TestBlockId(1), got.span()).ok());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
}

// Freeing the owner of a block's record passes the record to an older copy; while that put
// waits on the catalog, the copy it goes to is not freed under it: its Free waits too, so its
// extent is not handed out while a record for it is being put (with a third copy, a kill -9
// would then leave that one without a record).
TEST(NvmeTierCatalogStallTest, ACopyTheRecordIsPassingToIsNotFreedUnderThePut) {
  GatedTier gated;
  auto tier = MustOpen(gated.options());
  const Extent older = WriteTestBlock(*tier, 1);
  const Extent owner = WriteTestBlock(*tier, 1);
  gated.fs->Close();
  std::future<void> freeing_owner, freeing_older;
  struct OpenAtExit {
    GatedLogFs& fs;
    ~OpenAtExit() { fs.Open(); }
  } open_at_exit{*gated.fs};
  freeing_owner = std::async(std::launch::async, [&] { tier->Free(owner); });
  ASSERT_TRUE(gated.fs->AwaitWaiter()) << "the record's pass never reached the catalog";
  freeing_older = std::async(std::launch::async, [&] { tier->Free(older); });
  for (int i = 0; i < 1000 && !tier->BlocksStartingIn(older)->empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(tier->BlocksStartingIn(older)->empty()) << "the Free never began";
  const Result<Extent> next = tier->Allocate(8192);
  ASSERT_TRUE(next.ok());
  EXPECT_NE(next->offset, older.offset) << "the copy the record is passing to was reused";
  gated.fs->Open();
  freeing_owner.get();
  freeing_older.get();
  ASSERT_TRUE(tier->Sync().ok());
  EXPECT_TRUE(Records(*tier).empty());
}

// Threads write blocks (two copies of a block at times), free them and meet stalls, so that
// frees queue their releases behind each other's puts. After a clean close the catalog holds
// exactly one record per block with a live copy, naming a live copy with its bytes, and none of
// the blocks freed for good.
TEST(NvmeTierCatalogStallTest, ConcurrentWritesAndFreesLeaveExactlyTheLiveBlocksRecorded) {
  testing::TempDir dir;
  const NvmeTier::Options o = Opts(dir.path());
  constexpr int kThreads = 4;
  constexpr uint64_t kIdsPerThread = 16;
  // Each copy's bytes are those of FillTestBlock(seed); seeds are unique.
  struct Copy {
    Extent extent;
    uint64_t seed;
  };
  std::vector<std::map<uint64_t, std::vector<Copy>>> live(kThreads);
  {
    auto tier = MustOpen(o);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(t + 1);
        AlignedBuffer buf(8192);
        auto& mine = live[t];
        for (uint64_t step = 0; step < 400; ++step) {
          const uint64_t id = t * kIdsPerThread + rng() % kIdsPerThread;
          std::vector<Copy>& copies = mine[id];
          if (rng() % 16 == 0) tier->catalog_for_testing().StallWritesForTesting(1);
          if (copies.size() < 2 && rng() % 2 == 0) {
            auto e = tier->Allocate(buf.size());
            if (!e.ok()) continue;
            const uint64_t seed = (step << 16) | (static_cast<uint64_t>(t) << 8) | 1;
            FillTestBlock(buf.span(), seed);
            if (!tier->WriteBlock(*e, TestBlockId(id), buf.span()).ok()) {
              ADD_FAILURE() << "write failed";
              tier->Free(*e);
              continue;
            }
            copies.push_back({*e, seed});
          } else if (!copies.empty()) {
            const size_t k = rng() % copies.size();
            tier->Free(copies[k].extent);
            copies.erase(copies.begin() + static_cast<std::ptrdiff_t>(k));
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    ASSERT_TRUE(tier->Sync().ok());
    EXPECT_EQ(tier->nvme_stats().catalog_errors, 0u);
  }
  auto tier = MustOpen(o);
  std::map<uint64_t, Extent> recovered;  // by id
  for (const RecoveredBlock& b : tier->TakeRecovered()) {
    EXPECT_TRUE(recovered.emplace(b.key.high, b.extent).second) << "two records of " << b.key.high;
  }
  size_t with_copies = 0;
  for (const auto& mine : live) {
    for (const auto& [id, copies] : mine) {
      auto it = recovered.find(id);
      if (copies.empty()) {
        EXPECT_EQ(it, recovered.end()) << "block " << id << " was freed, yet recorded";
        continue;
      }
      ++with_copies;
      ASSERT_NE(it, recovered.end()) << "block " << id << " has a live copy, yet no record";
      auto copy = std::find_if(copies.begin(), copies.end(),
                               [&](const Copy& c) { return c.extent.offset == it->second.offset; });
      ASSERT_NE(copy, copies.end()) << "block " << id << "'s record names no live copy";
      AlignedBuffer got(it->second.length), want(it->second.length);
      FillTestBlock(want.span(), copy->seed);
      ASSERT_TRUE(tier->ReadBlock(it->second, TestBlockId(id), got.span()).ok());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << "block " << id;
    }
  }
  EXPECT_EQ(recovered.size(), with_copies);
}

}  // namespace
}  // namespace kvtier::tiers::nvme
