#include "tiers/nvme/io_backend.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "tiers/nvme/aligned_buffer.h"
#include "tiers/nvme/testing/fault_injector.h"
#include "tiers/nvme/testing/temp_dir.h"

namespace kvtier::tiers::nvme {
namespace {

using testing::Fault;
using testing::FaultInjector;
using testing::FaultRule;

constexpr uint64_t kBlock = 64 * 1024;

struct UringKind {
  static constexpr IoBackendKind kKind = IoBackendKind::kIoUring;
};
struct ThreadsKind {
  static constexpr IoBackendKind kKind = IoBackendKind::kThreads;
};

// One suite, run against both real backends: whatever passes here may stand in for the other.
template <typename K>
class IoBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_ = ::open(dir_.file("data").c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
    if (fd_ < 0) fd_ = ::open(dir_.file("data").c_str(), O_RDWR | O_CREAT, 0600);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(::ftruncate(fd_, 64 * kBlock), 0);
    Rebuild(4);
  }
  void TearDown() override { ::close(fd_); }

  void Rebuild(uint32_t depth) {
    backend_.reset();
    IoBackendConfig config{.kind = K::kKind, .queue_depth = depth, .ring_count = 2,
                           .fault_filter = faults_};
    auto made = MakeIoBackend(config);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    backend_ = std::move(made).value();
  }

  static void Fill(AlignedBuffer& buf, uint8_t seed) {
    for (size_t i = 0; i < buf.size(); ++i) buf.data()[i] = std::byte(uint8_t(seed + i * 7));
  }

  // Writes `count` blocks (block i from a buffer filled with seed i) in one batch, reads them back
  // in another and compares. Returns the statuses of the write batch then the read batch.
  std::vector<Status> RoundTrip(int count) {
    std::vector<AlignedBuffer> out, in;
    std::vector<IoRequest> writes, reads;
    for (int i = 0; i < count; ++i) {
      out.emplace_back(kBlock);
      in.emplace_back(kBlock);
      Fill(out.back(), uint8_t(i));
    }
    for (int i = 0; i < count; ++i) {
      writes.push_back({IoOp::kWrite, fd_, i * kBlock, out[i].data(), kBlock, {}});
      reads.push_back({IoOp::kRead, fd_, i * kBlock, in[i].data(), kBlock, {}});
    }
    backend_->Submit(writes);
    backend_->Submit(reads);
    std::vector<Status> statuses;
    for (int i = 0; i < count; ++i) {
      statuses.push_back(writes[i].status);
      statuses.push_back(reads[i].status);
      if (writes[i].status.ok() && reads[i].status.ok()) {
        EXPECT_EQ(std::memcmp(out[i].data(), in[i].data(), kBlock), 0) << "block " << i;
      }
    }
    return statuses;
  }

  testing::TempDir dir_;
  int fd_ = -1;
  std::shared_ptr<FaultInjector> faults_ = std::make_shared<FaultInjector>();
  std::unique_ptr<IoBackend> backend_;
};

using Kinds = ::testing::Types<UringKind, ThreadsKind>;
TYPED_TEST_SUITE(IoBackendTest, Kinds);

TYPED_TEST(IoBackendTest, ReportsItsKindAndDepth) {
  EXPECT_EQ(this->backend_->kind(), TypeParam::kKind);
  EXPECT_EQ(this->backend_->queue_depth(), 4u);
}

TYPED_TEST(IoBackendTest, BatchLargerThanQueueDepthRoundTrips) {
  for (const Status& s : this->RoundTrip(20)) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(this->backend_->in_flight(), 0u);
}

TYPED_TEST(IoBackendTest, ShortTransfersAreResubmitted) {
  this->faults_->Set({.fault = Fault::kShort, .rate = 0.5, .seed = 7});
  for (const Status& s : this->RoundTrip(16)) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(this->faults_->injected(), 0u);
}

TYPED_TEST(IoBackendTest, EagainIsRetried) {
  this->faults_->Set({.fault = Fault::kEagain, .rate = 0.4, .seed = 3});
  for (const Status& s : this->RoundTrip(16)) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(this->faults_->injected(), 0u);
}

TYPED_TEST(IoBackendTest, EndlessEagainGivesUpWithDeviceError) {
  this->faults_->Set({.fault = Fault::kEagain, .rate = 1.0});
  std::vector<Status> statuses = this->RoundTrip(1);
  EXPECT_EQ(statuses[0].code(), StatusCode::kDeviceError);
  EXPECT_NE(statuses[0].message().find("gave up"), std::string::npos);
}

TYPED_TEST(IoBackendTest, EioOnTheNthCompletionFailsExactlyThatRequest) {
  this->faults_->Set({.fault = Fault::kEio, .reads = false, .nth = 3});
  std::vector<Status> statuses = this->RoundTrip(6);
  int failed = 0;
  for (const Status& s : statuses) {
    if (s.ok()) continue;
    ++failed;
    EXPECT_EQ(s.code(), StatusCode::kDeviceError);
    EXPECT_NE(s.message().find("Input/output error"), std::string::npos) << s.message();
  }
  EXPECT_EQ(failed, 1);
}

TYPED_TEST(IoBackendTest, EnospcIsADeviceErrorNamingTheCause) {
  this->faults_->Set({.fault = Fault::kEnospc, .reads = false, .rate = 1.0});
  std::vector<Status> statuses = this->RoundTrip(2);
  EXPECT_EQ(statuses[0].code(), StatusCode::kDeviceError);
  EXPECT_NE(statuses[0].message().find("No space left"), std::string::npos);
}

TYPED_TEST(IoBackendTest, ReadPastEndOfFileIsADeviceError) {
  AlignedBuffer buf(kBlock);
  IoRequest r{IoOp::kRead, this->fd_, 64 * kBlock, buf.data(), kBlock, {}};
  this->backend_->Submit({&r, 1});
  EXPECT_EQ(r.status.code(), StatusCode::kDeviceError);
  EXPECT_NE(r.status.message().find("end of file"), std::string::npos) << r.status.message();
}

TYPED_TEST(IoBackendTest, BadDescriptorIsADeviceError) {
  AlignedBuffer buf(kBlock);
  IoRequest r{IoOp::kWrite, 12345, 0, buf.data(), kBlock, {}};
  this->backend_->Submit({&r, 1});
  EXPECT_EQ(r.status.code(), StatusCode::kDeviceError);
  EXPECT_TRUE(this->backend_->Sync(12345).code() == StatusCode::kDeviceError);
  EXPECT_TRUE(this->backend_->Sync(this->fd_).ok());
}

TYPED_TEST(IoBackendTest, RegisteredRegionRoundTripsAndUsesFixedBuffers) {
  AlignedBuffer region(8 * kBlock);
  ASSERT_TRUE(this->backend_->RegisterRegion(region.data(), region.size()).ok());
  EXPECT_EQ(this->backend_->RegisterRegion(region.data(), region.size()).code(),
            TypeParam::kKind == IoBackendKind::kIoUring ? StatusCode::kInvalidArgument
                                                        : StatusCode::kOk);
  for (size_t i = 0; i < region.size(); ++i) region.data()[i] = std::byte(uint8_t(i * 13));
  std::vector<IoRequest> writes, reads;
  AlignedBuffer back(8 * kBlock);
  for (int i = 0; i < 8; ++i) {
    writes.push_back({IoOp::kWrite, this->fd_, i * kBlock, region.data() + i * kBlock, kBlock, {}});
  }
  this->backend_->Submit(writes);
  for (int i = 0; i < 4; ++i) {  // half into the region, half into ordinary memory
    reads.push_back({IoOp::kRead, this->fd_, i * kBlock, back.data() + i * kBlock, kBlock, {}});
  }
  std::memset(region.data() + 4 * kBlock, 0, 4 * kBlock);
  for (int i = 4; i < 8; ++i) {
    reads.push_back({IoOp::kRead, this->fd_, i * kBlock, region.data() + i * kBlock, kBlock, {}});
  }
  this->backend_->Submit(reads);
  for (auto& r : writes) EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  for (auto& r : reads) EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(std::memcmp(back.data() + i * kBlock, region.data() + i * kBlock, kBlock), 0);
  }
  for (size_t i = 4 * kBlock; i < region.size(); ++i) {
    ASSERT_EQ(region.data()[i], std::byte(uint8_t(i * 13))) << i;
  }
  if (TypeParam::kKind == IoBackendKind::kIoUring) {
    EXPECT_EQ(this->backend_->fixed_buffer_requests(), 12u);
  }
}

TYPED_TEST(IoBackendTest, ConcurrentSubmittersEachGetTheirOwnBytes) {
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer out(kBlock), in(kBlock);
      for (int round = 0; round < 20; ++round) {
        this->Fill(out, uint8_t(t * 31 + round));
        IoRequest w{IoOp::kWrite, this->fd_, t * kBlock, out.data(), kBlock, {}};
        this->backend_->Submit({&w, 1});
        IoRequest r{IoOp::kRead, this->fd_, t * kBlock, in.data(), kBlock, {}};
        this->backend_->Submit({&r, 1});
        if (!w.status.ok() || !r.status.ok() || std::memcmp(out.data(), in.data(), kBlock) != 0) {
          ++bad;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

// The kernel refusing an io_uring submission (ENOMEM) leaves the prepared entries in the ring:
// the batch must fail at once rather than wait for their completions, and the next batch on the
// ring must not send them (writes of buffers their owner has since freed, to extents that may be
// another block's by then). One ring, so that the second batch uses the same one.
TEST(UringBackendTest, ARefusedSubmissionFailsItsBatchAndItsEntriesAreNeverSent) {
  testing::TempDir dir;
  const int fd = ::open(dir.file("data").c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 16 * kBlock), 0);
  auto faults = std::make_shared<FaultInjector>();
  auto made = MakeIoBackend(
      {.kind = IoBackendKind::kIoUring, .queue_depth = 4, .ring_count = 1, .fault_filter = faults});
  if (!made.ok()) GTEST_SKIP() << "io_uring unavailable: " << made.status().ToString();
  IoBackend& backend = **made;
  const auto batch = [&](uint64_t first_block, std::vector<AlignedBuffer>& buffers, IoOp op) {
    std::vector<IoRequest> requests;
    for (size_t i = 0; i < buffers.size(); ++i) {
      requests.push_back({op, fd, (first_block + i) * kBlock, buffers[i].data(), kBlock, {}});
    }
    backend.Submit(requests);
    std::vector<Status> statuses;
    for (const IoRequest& r : requests) statuses.push_back(r.status);
    return statuses;
  };
  std::vector<AlignedBuffer> refused;
  for (int i = 0; i < 4; ++i) {
    refused.emplace_back(kBlock);
    std::memset(refused.back().data(), 0xAA, kBlock);
  }
  faults->RefuseSubmissions(1);
  auto first = std::async(std::launch::async, [&] { return batch(0, refused, IoOp::kWrite); });
  ASSERT_EQ(first.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "the batch waits for entries the kernel never took";
  for (const Status& st : first.get()) EXPECT_FALSE(st.ok());
  for (AlignedBuffer& b : refused) std::memset(b.data(), 0xEE, kBlock);  // "reused" by its owner

  std::vector<AlignedBuffer> later;
  for (int i = 0; i < 4; ++i) {
    later.emplace_back(kBlock);
    std::memset(later.back().data(), 0x55, kBlock);
  }
  for (const Status& st : batch(8, later, IoOp::kWrite)) EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<AlignedBuffer> back;
  for (int i = 0; i < 4; ++i) back.emplace_back(kBlock);
  for (const Status& st : batch(0, back, IoOp::kRead)) ASSERT_TRUE(st.ok()) << st.ToString();
  for (const AlignedBuffer& b : back) {
    EXPECT_EQ(std::count(b.data(), b.data() + kBlock, std::byte{0}), static_cast<long>(kBlock))
        << "a refused write reached the file";
  }
  ::close(fd);
}

TEST(MakeIoBackendTest, RejectsAbsurdDepths) {
  EXPECT_EQ(MakeIoBackend({.queue_depth = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeIoBackend({.queue_depth = 8, .ring_count = 0}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MakeIoBackendTest, AutoGivesAWorkingBackend) {
  auto made = MakeIoBackend({});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_NE((*made)->kind(), IoBackendKind::kAuto);
}

// Refuses io_uring_setup with EPERM in this process, as a seccomp profile (Docker's default) or
// kernel.io_uring_disabled does. Returns false where seccomp is unavailable.
bool RefuseIoUringSetup() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

// In a child process (the filter cannot be removed): auto falls back to threads and works;
// io_uring asked for by name is an error.
TEST(MakeIoBackendTest, AutoFallsBackToThreadsWhereIoUringIsRefused) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!RefuseIoUringSetup()) ::_exit(77);
    auto named = MakeIoBackend({.kind = IoBackendKind::kIoUring});
    if (named.ok() || named.status().code() != StatusCode::kPermissionDenied) ::_exit(1);
    auto made = MakeIoBackend({.kind = IoBackendKind::kAuto, .queue_depth = 2});
    if (!made.ok() || (*made)->kind() != IoBackendKind::kThreads) ::_exit(2);
    AlignedBuffer buf(4096);
    IoRequest r{IoOp::kRead, ::open("/proc/self/exe", O_RDONLY), 0, buf.data(), 4096, {}};
    (*made)->Submit({&r, 1});
    ::_exit(r.status.ok() ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "seccomp unavailable";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(MakeIoBackendTest, ParsesKindNames) {
  EXPECT_EQ(*ParseIoBackendKind("io_uring"), IoBackendKind::kIoUring);
  EXPECT_EQ(*ParseIoBackendKind("threads"), IoBackendKind::kThreads);
  EXPECT_EQ(*ParseIoBackendKind("auto"), IoBackendKind::kAuto);
  EXPECT_EQ(ParseIoBackendKind("aio").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(IoBackendKindName(IoBackendKind::kThreads), "threads");
}

}  // namespace
}  // namespace kvtier::tiers::nvme
