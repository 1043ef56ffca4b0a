// A client that maps kvtierd's GPU pool, against a real daemon (KVTIERD_PATH) that is stopped
// (SIGTERM) while the import is held: the daemon exits, after gpu.detach_timeout_ms when the
// client makes no call, before it when the client answers -SHUTDOWN by closing its import and
// detaching; and the client survives it, its own memory intact and its copier still working.
// Built twice: over the fake pool (gpu.fake, a memfd) with the fake copier (label integration,
// every machine), and with KVTIER_TEST_CUDA_POOL over the daemon's CUDA pool, imported over CUDA
// IPC and read by CudaDeviceCopier (label gpu).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/gpu/device_transfer.h"
#include "client/gpu/fake_device_copier.h"
#include "client/gpu/gpu_pool_import.h"
#include "client/gpu/paged_test_util.h"
#include "client/gpu/test_device_memory.h"
#include "client/testing/spawned_kvtierd.h"
#if KVTIER_TEST_CUDA_POOL
#include <cuda_runtime_api.h>

#include "common/cuda/cuda_handles.h"
#include "tests/gpu/gpu_test_support.h"
#endif

namespace kvtier::client::gpu {
namespace {

using testing::Bytes;

constexpr uint64_t kBlockBytes = 64 << 10;
constexpr size_t kBlocks = 2;
#if KVTIER_TEST_CUDA_POOL
constexpr bool kCudaPool = true;
#else
constexpr bool kCudaPool = false;
#endif

using testing::DeviceMemory;

// Forwards to the copier under test and counts the copies that read the GPU pool's import, so
// that a test knows its blocks came out of the pool (after the daemon promoted them).
class PoolReadCounter final : public DeviceCopier {
 public:
  PoolReadCounter(DeviceCopier& inner, const GpuPoolImport& pool) : inner_(inner), pool_(pool) {}
  bool fake() const override { return inner_.fake(); }
  int device() const override { return inner_.device(); }
  Status OrderAfter(const CallerStream& caller) override { return inner_.OrderAfter(caller); }
  Status Copy(void* dst, const void* src, size_t bytes, CopyDirection direction) override {
    const auto* from = static_cast<const std::byte*>(src);
    if (pool_.mapped() && from >= pool_.base() && from < pool_.base() + pool_.size_bytes()) {
      ++pool_reads_;
    }
    return inner_.Copy(dst, src, bytes, direction);
  }
  Status GatherBlocks(const PagedKvLayout& layout,
                      std::span<const PagedBlockCopy> entries) override {
    return inner_.GatherBlocks(layout, entries);
  }
  Status ScatterBlocks(std::span<const PagedBlockCopy> entries,
                       const PagedKvLayout& layout) override {
    return inner_.ScatterBlocks(entries, layout);
  }
  Status Synchronize() override { return inner_.Synchronize(); }
  uint64_t pool_reads() const { return pool_reads_; }

 private:
  DeviceCopier& inner_;
  const GpuPoolImport& pool_;
  uint64_t pool_reads_ = 0;
};

// The two builds of this file need distinct suite names: ctest lists both binaries' tests.
#if KVTIER_TEST_CUDA_POOL
#define SHUTDOWN_TEST(name) TEST_F(CudaGpuPoolShutdownTest, name)
#else
#define SHUTDOWN_TEST(name) TEST_F(GpuPoolShutdownTest, name)
#endif

class GpuPoolShutdownTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if KVTIER_TEST_CUDA_POOL
    KVTIER_REQUIRE_CUDA_DEVICE();
#endif
    Result<std::unique_ptr<DeviceCopier>> copier = MakeDeviceCopier({.fake = !kCudaPool});
    ASSERT_TRUE(copier.ok()) << copier.status().ToString();
    copier_ = std::move(copier).value();
  }

  void TearDown() override { daemon_.Stop(); }

  // Starts kvtierd with a 16 MiB GPU tier that takes a block up at its first read, and a
  // client that has attached the arena and imported the pool, with kBlocks blocks read out of the
  // pool into `target_` (their bytes: expected_).
  void StartAndImport(uint64_t detach_timeout_ms) {
    const std::string config =
        "gpu:\n"
#if !KVTIER_TEST_CUDA_POOL
        "  fake: true\n"
#endif
        "  promote_after_reads: 1\n"
        "  detach_timeout_ms: " +
        std::to_string(detach_timeout_ms) + "\n";
    daemon_.Start(KVTIERD_PATH, "gpu-exit", {"--gpu-bytes", "16MiB"}, config);
    ASSERT_FALSE(HasFatalFailure());
    Result<Client> client = Client::Connect(daemon_.url());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::make_unique<Client>(std::move(client).value());
    ASSERT_TRUE(client_->Attach().ok());
    Result<NamespaceInfo> ns =
        client::testing::RegisterTestNamespace(*client_, "gpu-exit", kBlockBytes);
    ASSERT_TRUE(ns.ok()) << ns.status().ToString();
    ns_ = *ns;
    Result<GpuPoolImport> pool = AttachGpuPool(*client_, copier_->device());
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(pool).value();
    ASSERT_EQ(pool_.fake(), !kCudaPool);

    keys_ = client::testing::TestKeys(ns_, kBlocks, 7);
    expected_ = Bytes(kBlocks * kBlockBytes, 7);
    DeviceMemory source(expected_.size());
    source.Upload(expected_);
    const void* sources[] = {source.get(), source.get() + kBlockBytes};
    Result<std::vector<Status>> put =
        PutFromDevice(*client_, *copier_, ns_.id, keys_, sources, kBlockBytes);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    for (const Status& s : *put) ASSERT_TRUE(s.ok()) << s.ToString();

    // The first get reads the blocks from the host arena and makes them candidates; the daemon's
    // mover copies them up in the background, so later gets find them in the pool. A bounded
    // number of round trips, not a sleep: each get is a read the mover may answer.
    target_ = std::make_unique<DeviceMemory>(expected_.size());
    void* targets[] = {target_->get(), target_->get() + kBlockBytes};
    PoolReadCounter counter(*copier_, pool_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (counter.pool_reads() < kBlocks && std::chrono::steady_clock::now() < deadline) {
      Result<size_t> got =
          GetToDevice(*client_, counter, ns_.id, keys_, targets, kBlockBytes, &pool_);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_EQ(*got, kBlocks);
    }
    ASSERT_GE(counter.pool_reads(), kBlocks) << "the blocks never came out of the GPU pool";
    ASSERT_EQ(target_->Download(expected_.size()), expected_);
  }

  // The client's own memory after the daemon is gone: what it read is intact, and its copier
  // still copies between its own buffers.
  void ExpectTheClientKeepsWorking() {
    EXPECT_EQ(target_->Download(expected_.size()), expected_);
    DeviceMemory fresh(expected_.size());
    ASSERT_TRUE(
        copier_->Copy(fresh.get(), target_->get(), expected_.size(), CopyDirection::kDeviceToDevice)
            .ok());
    ASSERT_TRUE(copier_->Synchronize().ok());
    EXPECT_EQ(fresh.Download(expected_.size()), expected_);
    const std::vector<std::byte> other = Bytes(kBlockBytes, 99);
    fresh.Upload(other);
    EXPECT_EQ(fresh.Download(kBlockBytes), other);
#if KVTIER_TEST_CUDA_POOL
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
#endif
    // The daemon is gone: calls fail rather than hang.
    EXPECT_FALSE(client_->Ping().ok());
  }

  static bool CleanExit(const std::optional<int>& status) {
    return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
  }

  client::testing::SpawnedKvtierd daemon_;
  std::unique_ptr<DeviceCopier> copier_;
  std::unique_ptr<Client> client_;
  NamespaceInfo ns_;
  // Declared after the client and the copier: destroyed first, as a client must.
  GpuPoolImport pool_;
  std::vector<BlockKey> keys_;
  std::vector<std::byte> expected_;
  std::unique_ptr<DeviceMemory> target_;
};

#if KVTIER_TEST_CUDA_POOL
using CudaGpuPoolShutdownTest = GpuPoolShutdownTest;
#endif

SHUTDOWN_TEST(AnImporterThatMakesNoCallOutlivesTheDaemon) {
  constexpr uint64_t kDetachTimeoutMs = 500;
  ASSERT_NO_FATAL_FAILURE(StartAndImport(kDetachTimeoutMs));
  daemon_.Terminate();
  // The daemon waits gpu.detach_timeout_ms for an importer that is never told, then frees the
  // pool under it and exits cleanly; the margin only guards against a hang.
  const std::optional<int> status =
      daemon_.WaitForExit(std::chrono::milliseconds(kDetachTimeoutMs) + std::chrono::seconds(30));
  ASSERT_TRUE(CleanExit(status)) << (status ? "exit status " + std::to_string(*status)
                                            : std::string("still running: killed"));
  EXPECT_NE(daemon_.Log().find("1 clients still map the GPU pool"), std::string::npos)
      << daemon_.Log();

  ASSERT_TRUE(pool_.mapped());
#if !KVTIER_TEST_CUDA_POOL
  // The memfd outlives the daemon: the client's mapping still holds the blocks it was leased.
  bool found = false;
  for (uint64_t offset = 0; offset + kBlockBytes <= pool_.size_bytes(); offset += kBlockBytes) {
    found =
        found || std::memcmp(pool_.Slice(offset, kBlockBytes), expected_.data(), kBlockBytes) == 0;
  }
  EXPECT_TRUE(found) << "block 0 is no longer in the client's mapping of the pool";
#endif
  // Closing the import of a pool whose owner is gone is clean: nothing fails, no CUDA error is
  // left behind for the client's next launch.
  pool_ = GpuPoolImport();
  EXPECT_FALSE(pool_.mapped());
#if KVTIER_TEST_CUDA_POOL
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
#endif
  ExpectTheClientKeepsWorking();
}

SHUTDOWN_TEST(AClientToldOfTheShutdownDetachesAndTheDaemonExitsEarly) {
  // Long enough that the daemon's exit within the hang guard below shows that the wait ended
  // because the client detached, not because it ran out.
  constexpr uint64_t kDetachTimeoutMs = 600'000;
  ASSERT_NO_FATAL_FAILURE(StartAndImport(kDetachTimeoutMs));
  daemon_.Terminate();
  // Until the daemon starts its shutdown the gets succeed; then the first one answers -SHUTDOWN.
  void* targets[] = {target_->get(), target_->get() + kBlockBytes};
  Status told = Status::Ok();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (told.ok() && std::chrono::steady_clock::now() < deadline) {
    told = GetToDevice(*client_, *copier_, ns_.id, keys_, targets, kBlockBytes, &pool_).status();
  }
  ASSERT_EQ(told.code(), StatusCode::kShuttingDown) << told.ToString();
  EXPECT_NE(told.message().find("close the GPU pool import"), std::string::npos) << told.ToString();
  // What the daemon asks of a client told so, which the get has done: the import is closed and
  // the connection detached.
  EXPECT_FALSE(pool_.mapped());
  EXPECT_NE(told.message().find("closed and detached"), std::string::npos) << told.ToString();

  const std::optional<int> status = daemon_.WaitForExit(std::chrono::seconds(30));
  ASSERT_TRUE(CleanExit(status)) << (status ? "exit status " + std::to_string(*status)
                                            : std::string("still running: killed"));
  const std::string log = daemon_.Log();
  EXPECT_NE(log.find("no importer left"), std::string::npos) << log;
  EXPECT_EQ(log.find("still map the GPU pool"), std::string::npos) << log;
  ExpectTheClientKeepsWorking();
}

}  // namespace
}  // namespace kvtier::client::gpu
