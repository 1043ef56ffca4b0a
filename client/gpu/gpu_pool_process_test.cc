// The daemon's GPU pool read by another process, as an engine on the node reads it: an
// in-process server shares its pool, and kvtier_gpu_pool_child (KVTIER_GPU_POOL_CHILD_PATH)
// attaches it and copies leased blocks out device-to-device, or holds leases and its import until
// it is killed. Built twice: over a FakeGpuTier (a memfd) with the fake copier on every machine,
// and with KVTIER_TEST_CUDA_POOL over a GpuTier, exported over CUDA IPC, with the CUDA copier and
// the paged kernel (label gpu; skipped without a device, as tests/gpu/gpu_test_support.h says).
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "client/gpu/paged_test_util.h"
#include "daemon/server/test_client.h"
#include "tests/fakes/child_process.h"
#if KVTIER_TEST_CUDA_POOL
#include "tests/gpu/gpu_test_support.h"
#include "tiers/gpu/gpu_tier.h"
#endif

namespace kvtier::client::gpu {
namespace {

using server::testing::TestKey;
using server::testing::TestServer;

constexpr uint64_t kBlockBytes = 64 << 10;
constexpr uint64_t kPoolBytes = uint64_t{16} << 20;
constexpr size_t kBlocks = 4;
constexpr uint32_t kSeed = 70;

#if KVTIER_TEST_CUDA_POOL
constexpr const char* kCopier = "cuda";
#else
constexpr const char* kCopier = "fake";
#endif

using kvtier::testing::Child;
using kvtier::testing::ReadLine;
using kvtier::testing::Spawn;
using kvtier::testing::Wait;

class GpuPoolProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if KVTIER_TEST_CUDA_POOL
    KVTIER_REQUIRE_CUDA_DEVICE();
    Result<std::unique_ptr<tiers::GpuTier>> tier =
        tiers::GpuTier::Create({.capacity_bytes = kPoolBytes});
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    ts_ = std::make_unique<TestServer>(server::ServerOptions{},
                                       std::unique_ptr<tiers::DeviceTier>(std::move(tier).value()));
#else
    ts_ =
        std::make_unique<TestServer>(server::ServerOptions{}, true, uint64_t{64} << 20, kPoolBytes);
#endif
    ASSERT_TRUE(ts_->status().ok()) << ts_->status().ToString();
    ns_.high = 0x6770755f706f6f6cULL;  // "gpu_pool"
    ns_.low = 1;
    ASSERT_TRUE(ts_->store()
                    .RegisterNamespace({.id = ns_, .block_bytes = kBlockBytes, .label = "pool"})
                    .ok());
    for (size_t i = 0; i < kBlocks; ++i) {
      keys_.push_back(TestKey(i));
      ASSERT_TRUE(ts_->PlaceBlock(TierId::kGpu, ns_, keys_[i], Block(i)).ok());
    }
  }

  static std::vector<std::byte> Block(size_t i) {
    return testing::Bytes(kBlockBytes, kSeed + static_cast<uint32_t>(i));
  }

  Child SpawnChild(const std::string& mode) {
    std::vector<std::string> args = {
        KVTIER_GPU_POOL_CHILD_PATH,   kCopier,     mode,
        "unix://" + ts_->unix_path(), ns_.ToHex(), std::to_string(kBlockBytes),
        std::to_string(kSeed)};
    for (const BlockKey& key : keys_) args.push_back(key.ToHex());
    return Spawn(std::move(args));
  }

  // Runs the child in `mode` to its end; true when it exited 0 (it saw the right bytes).
  bool RunChild(const std::string& mode) {
    Child child = SpawnChild(mode);
    const std::string said = ReadLine(child.out);
    const int status = Wait(child);
    EXPECT_EQ(said, "served " + std::to_string(kBlocks)) << mode;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  std::unique_ptr<TestServer> ts_;
  NamespaceId ns_;
  std::vector<BlockKey> keys_;
};

// The two builds of this file need distinct suite names: ctest lists both binaries' tests.
#if KVTIER_TEST_CUDA_POOL
using CudaGpuPoolProcessTest = GpuPoolProcessTest;
#define POOL_TEST(name) TEST_F(CudaGpuPoolProcessTest, name)
#else
#define POOL_TEST(name) TEST_F(GpuPoolProcessTest, name)
#endif

POOL_TEST(AnotherProcessCopiesBlocksOutOfThePool) {
  EXPECT_TRUE(RunChild("copy")) << "the child failed or saw other bytes; see its stderr";
  EXPECT_TRUE(RunChild("paged")) << "the child failed or saw other bytes; see its stderr";
  ASSERT_TRUE(ts_->WaitForClients(0));
  EXPECT_TRUE(ts_->WaitForLeases(0));
}

POOL_TEST(AClientKilledWhileHoldingItsImportReleasesItsLeases) {
  Child child = SpawnChild("hold");
  ASSERT_EQ(ReadLine(child.out), "ready");
  EXPECT_EQ(ts_->store().Stats().leases_active, kBlocks);
  // The leased blocks are pinned while the child lives.
  EXPECT_EQ(ts_->store().Remove(ns_, keys_[0]).code(), StatusCode::kBusy);
  ASSERT_EQ(::kill(child.pid, SIGKILL), 0);
  const int status = Wait(child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;

  // The connection's cleanup released the leases; the pool and its blocks are untouched, and a
  // new importer reads them as before.
  ASSERT_TRUE(ts_->WaitForClients(0));
  EXPECT_TRUE(ts_->WaitForLeases(0));
  for (size_t i = 0; i < kBlocks; ++i) {
    std::vector<std::byte> out;
    ASSERT_TRUE(ts_->store().Get(ns_, keys_[i], out).ok());
    EXPECT_EQ(out, Block(i)) << i;
  }
  EXPECT_TRUE(RunChild("copy")) << "the second child failed or saw other bytes";
  EXPECT_TRUE(ts_->store().Remove(ns_, keys_[0]).ok());
}

}  // namespace
}  // namespace kvtier::client::gpu
