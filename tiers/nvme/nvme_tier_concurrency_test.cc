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
#include "tiers/nvme/testing/temp_dir.h"
#include "tiers/nvme/testing/test_blocks.h"

namespace kvtier::tiers::nvme {
namespace {

using testing::FillTestBlock;
using testing::TestBlockId;

constexpr uint64_t kMiB = 1 << 20;

NvmeTier::Options Opts(const std::string& dir) {
  NvmeTier::Options o;
  o.data_dir = dir;
  o.capacity_bytes = 64 * kMiB;
  o.io.queue_depth = 8;
  return o;
}

std::unique_ptr<NvmeTier> MustOpen(const NvmeTier::Options& o) {
  auto tier = NvmeTier::Open(o);
  if (!tier.ok()) {
    ADD_FAILURE() << tier.status().ToString();
    std::abort();  // the test cannot go on without a tier
  }
  return std::move(tier).value();
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

// A Free on a network thread does not wait for a write whose catalog put hangs: it leaves the
// record's release to that writer, which does it before it lets the catalog go.
TEST(NvmeTierCatalogStallTest, AFreeDoesNotWaitForAHangingCatalogWrite) {
  testing::TempDir dir;
  auto fs = std::make_shared<GatedLogFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  NvmeTier::Options o = Opts(dir.path());
  o.catalog_env = env.get();
  Extent kept;
  {
    auto tier = MustOpen(o);
    AlignedBuffer one(8192), two(8192);
    const Extent freed = *tier->Allocate(one.size());
    FillTestBlock(one.span(), 1);
    ASSERT_TRUE(tier->WriteBlock(freed, TestBlockId(1), one.span()).ok());
    kept = *tier->Allocate(two.size());
    FillTestBlock(two.span(), 2);
    fs->Close();
    auto writer = std::async(std::launch::async,
                             [&] { return tier->WriteBlock(kept, TestBlockId(2), two.span()); });
    ASSERT_TRUE(fs->AwaitWaiter());
    auto freeing = std::async(std::launch::async, [&] { tier->Free(freed); });
    const bool returned = freeing.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    EXPECT_TRUE(returned) << "Free waited for the hanging catalog write";
    // The release waits for the writer: the freed block's record is still there, the writer's
    // not yet.
    {
      const auto meanwhile = tier->catalog_for_testing().Load();
      ASSERT_TRUE(meanwhile.ok());
      ASSERT_EQ(meanwhile->records.size(), 1u);
      EXPECT_EQ(meanwhile->records[0].key, TestBlockId(1).key);
    }
    fs->Open();
    ASSERT_TRUE(writer.get().ok());
    freeing.get();
    EXPECT_EQ(tier->nvme_stats().catalog_deletes_deferred, 0u);
    ASSERT_TRUE(tier->Sync().ok());
    const auto loaded = tier->catalog_for_testing().Load();
    ASSERT_TRUE(loaded.ok());
    ASSERT_EQ(loaded->records.size(), 1u);
    EXPECT_EQ(loaded->records[0].key, TestBlockId(2).key);
  }
  o.catalog_env = nullptr;
  auto tier = MustOpen(o);
  const std::vector<RecoveredBlock> recovered = tier->TakeRecovered();
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0].extent, kept);
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
