// NvmeTier::WriteBlocks / ReadBlocks: a batch goes to the backend in one submission, and each block
// of it ends exactly as it would alone (its own status, its own verification and catalog record).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "tiers/nvme/aligned_buffer.h"
#include "tiers/nvme/nvme_tier.h"
#include "tiers/nvme/testing/fault_injector.h"
#include "tiers/nvme/testing/temp_dir.h"
#include "tiers/nvme/testing/test_blocks.h"

namespace kvtier::tiers::nvme {
namespace {

constexpr uint64_t kMiB = 1 << 20;
// Aligned blocks plus an unaligned tail: three requests per block (header, payload, tail).
constexpr uint64_t kBlockBytes = 256 * 1024 + 100;

BlockIdentity Id(uint64_t i) { return testing::TestBlockId(i); }
void Fill(std::span<std::byte> out, uint64_t i) { testing::FillTestBlock(out, i); }

// A real backend that remembers how many requests each Submit carried.
class RecordingBackend final : public IoBackend {
 public:
  explicit RecordingBackend(std::unique_ptr<IoBackend> real) : real_(std::move(real)) {}
  void Submit(std::span<IoRequest> requests) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      submissions_.push_back(requests.size());
    }
    real_->Submit(requests);
  }
  Status Sync(int fd) override { return real_->Sync(fd); }
  Status RegisterRegion(std::byte* base, uint64_t bytes) override {
    return real_->RegisterRegion(base, bytes);
  }
  IoBackendKind kind() const override { return real_->kind(); }
  uint32_t queue_depth() const override { return real_->queue_depth(); }
  uint64_t in_flight() const override { return real_->in_flight(); }
  uint64_t fixed_buffer_requests() const override { return real_->fixed_buffer_requests(); }

  std::vector<size_t> TakeSubmissions() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(submissions_, {});
  }

 private:
  std::unique_ptr<IoBackend> real_;
  std::mutex mu_;
  std::vector<size_t> submissions_;
};

class NvmeTierBatchTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  void Open(std::shared_ptr<CompletionFilter> filter = nullptr) {
    NvmeTier::Options o;
    o.data_dir = dir_.file("nvme");
    o.capacity_bytes = 64 * kMiB;
    o.io.kind = GetParam();
    o.io.queue_depth = 8;
    o.io.fault_filter = std::move(filter);
    auto real = MakeIoBackend(o.io);
    ASSERT_TRUE(real.ok()) << real.status().ToString();
    auto recording = std::make_unique<RecordingBackend>(std::move(real).value());
    backend_ = recording.get();
    auto tier = NvmeTier::Open(o, std::move(recording));
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::move(tier).value();
  }

  // n blocks allocated and filled in memory, not written yet.
  void Prepare(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      auto e = tier_->Allocate(kBlockBytes);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      extents_.push_back(*e);
      sources_.emplace_back(kBlockBytes);
      Fill(sources_.back().span(), i);
      writes_.push_back({*e, Id(i), sources_.back().span(), {}});
    }
  }

  std::vector<BlockRead> ReadsOf(std::vector<AlignedBuffer>& into) {
    std::vector<BlockRead> reads;
    for (size_t i = 0; i < extents_.size(); ++i) {
      into.emplace_back(kBlockBytes);
      reads.push_back({extents_[i], Id(i), into.back().span(), {}});
    }
    return reads;
  }

  bool Same(const AlignedBuffer& got, size_t i) {
    return std::memcmp(got.data(), sources_[i].data(), kBlockBytes) == 0;
  }

  testing::TempDir dir_;
  RecordingBackend* backend_ = nullptr;
  std::unique_ptr<NvmeTier> tier_;
  std::vector<Extent> extents_;
  std::vector<AlignedBuffer> sources_;
  std::vector<BlockWrite> writes_;
};

INSTANTIATE_TEST_SUITE_P(Backends, NvmeTierBatchTest,
                         ::testing::Values(IoBackendKind::kIoUring, IoBackendKind::kThreads),
                         [](const auto& info) {
                           return std::string(IoBackendKindName(info.param));
                         });

TEST_P(NvmeTierBatchTest, ABatchIsOneSubmissionAndEveryBlockReadsBack) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(Prepare(8));
  backend_->TakeSubmissions();
  tier_->WriteBlocks(writes_);
  for (const BlockWrite& w : writes_) EXPECT_TRUE(w.status.ok()) << w.status.ToString();
  EXPECT_EQ(backend_->TakeSubmissions(), std::vector<size_t>{8 * 3});

  std::vector<AlignedBuffer> got;
  std::vector<BlockRead> reads = ReadsOf(got);
  tier_->ReadBlocks(reads);
  EXPECT_EQ(backend_->TakeSubmissions(), std::vector<size_t>{8 * 3});
  for (size_t i = 0; i < reads.size(); ++i) {
    EXPECT_TRUE(reads[i].status.ok()) << i << ": " << reads[i].status.ToString();
    EXPECT_TRUE(Same(got[i], i)) << "block " << i;
  }
  const NvmeStats s = tier_->nvme_stats();
  EXPECT_EQ(s.writes, 8u);
  EXPECT_EQ(s.reads, 8u);
  EXPECT_EQ(s.bytes_admitted, 8 * kBlockBytes);
}

TEST_P(NvmeTierBatchTest, ABadBlockFailsAloneAndTheRestOfTheBatchGoesThrough) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(Prepare(4));
  tier_->Free(extents_[1]);  // block 1's extent is no longer allocated
  std::vector<std::byte> too_big(extents_[2].length + 1);
  writes_[2].src = too_big;
  tier_->WriteBlocks(writes_);
  EXPECT_TRUE(writes_[0].status.ok());
  EXPECT_EQ(writes_[1].status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(writes_[2].status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(writes_[3].status.ok());

  std::vector<AlignedBuffer> got;
  std::vector<BlockRead> reads = ReadsOf(got);
  reads[3].identity = Id(77);  // asked for as another block
  tier_->ReadBlocks(reads);
  EXPECT_TRUE(reads[0].status.ok());
  EXPECT_TRUE(Same(got[0], 0));
  EXPECT_EQ(reads[1].status.code(), StatusCode::kNotFound);
  EXPECT_EQ(reads[2].status.code(), StatusCode::kNotFound);  // its write never happened
  EXPECT_EQ(reads[3].status.code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(tier_->nvme_stats().checksum_failures, 1u);
}

TEST_P(NvmeTierBatchTest, ADeviceErrorFailsOnlyTheBlockItHit) {
  auto injector = std::make_shared<testing::FaultInjector>();
  ASSERT_NO_FATAL_FAILURE(Open(injector));
  ASSERT_NO_FATAL_FAILURE(Prepare(6));
  injector->Set({.fault = testing::Fault::kEio, .reads = false, .nth = 7});
  tier_->WriteBlocks(writes_);
  injector->Set({});
  size_t failed = 0;
  for (size_t i = 0; i < writes_.size(); ++i) {
    std::vector<std::byte> back(kBlockBytes);
    Status read = tier_->ReadBlock(extents_[i], Id(i), back);
    if (!writes_[i].status.ok()) {
      ++failed;
      EXPECT_EQ(writes_[i].status.code(), StatusCode::kDeviceError);
      EXPECT_EQ(read.code(), StatusCode::kNotFound) << "a failed write left a block behind";
    } else {
      EXPECT_TRUE(read.ok()) << read.ToString();
      EXPECT_EQ(std::memcmp(back.data(), sources_[i].data(), kBlockBytes), 0);
    }
  }
  EXPECT_EQ(failed, 1u);
  EXPECT_EQ(tier_->nvme_stats().io_errors, 1u);
}

TEST_P(NvmeTierBatchTest, APrefixInABatchIsReadWholeVerifiedAndCut) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(Prepare(3));
  tier_->WriteBlocks(writes_);
  std::vector<AlignedBuffer> got;
  std::vector<BlockRead> reads = ReadsOf(got);
  reads[1].dst = reads[1].dst.first(5000);
  tier_->ReadBlocks(reads);
  for (size_t i = 0; i < reads.size(); ++i) {
    ASSERT_TRUE(reads[i].status.ok()) << i << ": " << reads[i].status.ToString();
  }
  EXPECT_TRUE(Same(got[0], 0));
  EXPECT_EQ(std::memcmp(got[1].data(), sources_[1].data(), 5000), 0);
  EXPECT_TRUE(Same(got[2], 2));
}

TEST_P(NvmeTierBatchTest, BlocksWrittenInABatchSurviveARestart) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(Prepare(5));
  tier_->WriteBlocks(writes_);
  tier_.reset();
  ASSERT_NO_FATAL_FAILURE(Open());
  std::vector<RecoveredBlock> recovered = tier_->TakeRecovered();
  ASSERT_EQ(recovered.size(), 5u);
  std::vector<AlignedBuffer> got;
  std::vector<BlockRead> reads = ReadsOf(got);
  tier_->ReadBlocks(reads);
  for (size_t i = 0; i < reads.size(); ++i) {
    EXPECT_TRUE(reads[i].status.ok()) << reads[i].status.ToString();
    EXPECT_TRUE(Same(got[i], i));
  }
}

}  // namespace
}  // namespace kvtier::tiers::nvme
