// Gets served out of the daemon's GPU pool, on any machine: an in-process server over a store of
// [FakeGpuTier, HostTier] shares its fake pool (a memfd), AttachGpuPool maps it, and GetToDevice /
// GetToPaged with the fake copier copy GPU blocks "device-to-device" out of the client's own
// mapping, host-arena blocks out of the arena, and the rest inline.
#include "client/gpu/gpu_pool_import.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "client/gpu/device_transfer.h"
#include "client/gpu/fake_device_copier.h"
#include "client/gpu/paged_test_util.h"
#include "client/testing/spawned_kvtierd.h"
#include "daemon/server/test_client.h"

namespace kvtier::client::gpu {
namespace {

using server::testing::TestServer;
using testing::Bytes;
using testing::LayoutOver;
using testing::PagedShape;

constexpr uint64_t kBlockBytes = 64 << 10;
constexpr uint64_t kPoolBytes = uint64_t{16} << 20;

class GpuPoolImportTest : public ::testing::Test {
 protected:
  GpuPoolImportTest() : ts_(server::ServerOptions{}, true, uint64_t{64} << 20, kPoolBytes) {}

  void SetUp() override {
    ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString();
    Result<Client> client = Client::Connect("unix://" + ts_.unix_path());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::make_unique<Client>(std::move(client).value());
    ASSERT_TRUE(client_->Attach().ok());
    Result<NamespaceInfo> ns =
        client::testing::RegisterTestNamespace(*client_, "gpu-pool", kBlockBytes);
    ASSERT_TRUE(ns.ok()) << ns.status().ToString();
    ns_ = *ns;
  }

  // Places block i of `tiers` (kGpu or kHost; kNvme: leave it out, a miss) with Bytes(seed + i).
  std::vector<BlockKey> Place(const std::vector<TierId>& tiers, uint32_t seed) {
    std::vector<BlockKey> keys = client::testing::TestKeys(ns_, tiers.size(), seed);
    for (size_t i = 0; i < tiers.size(); ++i) {
      if (tiers[i] == TierId::kNvme) continue;
      const std::vector<std::byte> bytes = Bytes(kBlockBytes, seed + i);
      EXPECT_TRUE(ts_.PlaceBlock(tiers[i], ns_.id, keys[i], bytes).ok());
    }
    return keys;
  }

  GpuPoolImport Import() {
    Result<GpuPoolImport> pool = AttachGpuPool(*client_);
    EXPECT_TRUE(pool.ok()) << pool.status().ToString();
    return pool.ok() ? std::move(pool).value() : GpuPoolImport();
  }

  TestServer ts_;
  std::unique_ptr<Client> client_;
  NamespaceInfo ns_;
  FakeDeviceCopier copier_;
};

// Contiguous "device" buffers for `n` blocks.
struct Targets {
  explicit Targets(size_t n) : memory(n * kBlockBytes) {
    for (size_t i = 0; i < n; ++i) pointers.push_back(memory.data() + i * kBlockBytes);
  }
  std::vector<std::byte> Block(size_t i) const {
    return {memory.begin() + i * kBlockBytes, memory.begin() + (i + 1) * kBlockBytes};
  }
  std::vector<std::byte> memory;
  std::vector<void*> pointers;
};

TEST_F(GpuPoolImportTest, AttachMapsThePool) {
  GpuPoolImport pool = Import();
  ASSERT_TRUE(pool.mapped());
  EXPECT_TRUE(pool.fake());
  EXPECT_EQ(pool.device(), -1);
  EXPECT_EQ(pool.size_bytes(), kPoolBytes);
  // The client's own mapping of the daemon's pool: other addresses, the same bytes.
  EXPECT_NE(pool.base(), ts_.gpu()->pool_base());
  std::memcpy(ts_.gpu()->pool_base(), "pool", 4);
  EXPECT_EQ(std::memcmp(pool.base(), "pool", 4), 0);
  EXPECT_EQ(pool.Slice(kPoolBytes - 8, 8), pool.base() + kPoolBytes - 8);
  EXPECT_EQ(pool.Slice(kPoolBytes - 8, 9), nullptr);
  EXPECT_EQ(pool.Slice(kPoolBytes + 1, 0), nullptr);
}

TEST_F(GpuPoolImportTest, GetToDeviceCopiesGpuBlocksDeviceToDevice) {
  const std::vector<BlockKey> keys = Place({TierId::kGpu, TierId::kGpu, TierId::kGpu}, 10);
  GpuPoolImport pool = Import();
  Targets out(3);
  const uint64_t trips = client_->counters().round_trips;
  Result<size_t> got =
      GetToDevice(*client_, copier_, ns_.id, keys, out.pointers, kBlockBytes, &pool);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(out.Block(i), Bytes(kBlockBytes, 10 + i)) << i;
  EXPECT_EQ(copier_.counters().copies, 3u);
  EXPECT_EQ(copier_.counters().device_to_device_copies, 3u);
  EXPECT_EQ(client_->counters().round_trips - trips, 2u);  // ACQUIRE, RELEASE: nothing inline
  EXPECT_TRUE(ts_.WaitForLeases(0));
}

TEST_F(GpuPoolImportTest, AMixedPrefixTakesEachBlocksOwnPath) {
  // gpu, host, gpu, host, miss, gpu: four served, two of them out of the pool.
  const std::vector<BlockKey> keys = Place(
      {TierId::kGpu, TierId::kHost, TierId::kGpu, TierId::kHost, TierId::kNvme, TierId::kGpu}, 20);
  GpuPoolImport pool = Import();
  Targets out(6);
  Result<size_t> got =
      GetToDevice(*client_, copier_, ns_.id, keys, out.pointers, kBlockBytes, &pool);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out.Block(i), Bytes(kBlockBytes, 20 + i)) << i;
  EXPECT_EQ(copier_.counters().copies, 4u);
  EXPECT_EQ(copier_.counters().device_to_device_copies, 2u);
  EXPECT_TRUE(ts_.WaitForLeases(0));
}

TEST_F(GpuPoolImportTest, WithoutThePoolGpuBlocksAreReadInline) {
  // The connection attached the pool, but this get is not given it: the GPU leases are released
  // and the blocks come inline, through host staging memory.
  const std::vector<BlockKey> keys = Place({TierId::kHost, TierId::kGpu, TierId::kHost}, 30);
  GpuPoolImport pool = Import();
  Targets out(3);
  Result<size_t> got = GetToDevice(*client_, copier_, ns_.id, keys, out.pointers, kBlockBytes);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(out.Block(i), Bytes(kBlockBytes, 30 + i)) << i;
  EXPECT_EQ(copier_.counters().device_to_device_copies, 0u);
  EXPECT_EQ(copier_.counters().copies, 3u);  // one from the arena, two from inline staging
  EXPECT_TRUE(ts_.WaitForLeases(0));

  // The plain Get (memcpy) never reads the pool either: the GPU block comes inline.
  std::vector<std::byte> plain(3 * kBlockBytes);
  void* plain_blocks[] = {plain.data(), plain.data() + kBlockBytes, plain.data() + 2 * kBlockBytes};
  Result<size_t> plain_got = client_->Get(ns_.id, keys, plain_blocks, kBlockBytes);
  ASSERT_TRUE(plain_got.ok()) << plain_got.status().ToString();
  EXPECT_EQ(*plain_got, 3u);
  EXPECT_EQ(std::vector<std::byte>(plain.begin() + kBlockBytes, plain.begin() + 2 * kBlockBytes),
            Bytes(kBlockBytes, 31));
  EXPECT_TRUE(ts_.WaitForLeases(0));
}

TEST_F(GpuPoolImportTest, AfterDetachingGpuBlocksComeInlineEvenWithAnImport) {
  const std::vector<BlockKey> keys = Place({TierId::kGpu, TierId::kHost}, 35);
  GpuPoolImport pool = Import();
  ASSERT_TRUE(client_->DetachGpuPool().ok());
  // The daemon no longer leases pool blocks to this connection, so even a caller that passes the
  // import gets the GPU block inline.
  Targets out(2);
  Result<size_t> got =
      GetToDevice(*client_, copier_, ns_.id, keys, out.pointers, kBlockBytes, &pool);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(out.Block(i), Bytes(kBlockBytes, 35 + i)) << i;
  EXPECT_EQ(copier_.counters().device_to_device_copies, 0u);
  EXPECT_TRUE(ts_.WaitForLeases(0));
  // Attaching again brings the pool back.
  GpuPoolImport again = Import();
  ASSERT_TRUE(GetToDevice(*client_, copier_, ns_.id, keys, out.pointers, kBlockBytes, &again).ok());
  EXPECT_EQ(copier_.counters().device_to_device_copies, 1u);
}

TEST_F(GpuPoolImportTest, GetToPagedScattersStraightOutOfThePool) {
  // 8 planes of 8 KiB per block = one 64 KiB block; 8 blocks per plane, 16 KiB stride.
  const PagedShape shape{
      .planes = 8, .blocks = 8, .stride_bytes = 16 << 10, .layer_block_bytes = 8 << 10};
  const std::vector<BlockKey> keys = Place({TierId::kGpu, TierId::kHost, TierId::kGpu}, 40);
  GpuPoolImport pool = Import();
  std::vector<std::byte> cache(shape.total_bytes());
  const PagedKvLayout layout = LayoutOver(cache.data(), shape);
  ASSERT_EQ(layout.block_bytes(), kBlockBytes);
  const uint64_t ids[] = {6, 1, 3};
  Result<size_t> got = GetToPaged(*client_, copier_, ns_.id, keys, layout, ids, &pool);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 3u);
  std::vector<std::byte> mirror(shape.total_bytes());
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<std::byte> block = Bytes(kBlockBytes, 40 + i);
    ReferenceScatter(block.data(), LayoutOver(mirror.data(), shape), ids[i]);
  }
  EXPECT_EQ(cache, mirror);
  EXPECT_EQ(copier_.counters().scatters, 3u);
  EXPECT_EQ(copier_.counters().device_scatters, 2u);
  EXPECT_TRUE(ts_.WaitForLeases(0));
}

TEST_F(GpuPoolImportTest, AFailedPoolCopyEndsThePrefix) {
  const std::vector<BlockKey> keys = Place({TierId::kGpu, TierId::kGpu}, 50);
  GpuPoolImport pool = Import();
  Targets out(2);
  copier_.FailNext(1);
  EXPECT_EQ(GetToDevice(*client_, copier_, ns_.id, keys, out.pointers, kBlockBytes, &pool)
                .status()
                .code(),
            StatusCode::kDeviceError);
  EXPECT_TRUE(ts_.WaitForLeases(0));
  EXPECT_EQ(*GetToDevice(*client_, copier_, ns_.id, keys, out.pointers, kBlockBytes, &pool), 2u);
}

TEST_F(GpuPoolImportTest, AFakePoolNeedsTheFakeCopier) {
  struct RealLooking : DeviceCopier {
    bool fake() const override { return false; }
    int device() const override { return 0; }
    Status OrderAfter(const CallerStream&) override { return Status::Ok(); }
    Status Copy(void*, const void*, size_t, CopyDirection) override { return Status::Ok(); }
    Status GatherBlocks(const PagedKvLayout&, std::span<const PagedBlockCopy>) override {
      return Status::Ok();
    }
    Status ScatterBlocks(std::span<const PagedBlockCopy>, const PagedKvLayout&) override {
      return Status::Ok();
    }
    Status Synchronize() override { return Status::Ok(); }
  } real_looking;
  const std::vector<BlockKey> keys = Place({TierId::kGpu}, 60);
  GpuPoolImport pool = Import();
  Targets out(1);
  EXPECT_EQ(GetToDevice(*client_, real_looking, ns_.id, keys, out.pointers, kBlockBytes, &pool)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

// The daemon stopping tells an attached connection -SHUTDOWN: a get given the import answers
// kShuttingDown having closed it and detached, which ends the daemon's wait for its importers.
TEST_F(GpuPoolImportTest, AGetToldOfTheShutdownClosesTheImportAndDetaches) {
  const std::vector<BlockKey> keys = Place({TierId::kGpu, TierId::kHost}, 70);
  GpuPoolImport pool = Import();
  ASSERT_EQ(ts_.server().gpu_importers(), 1u);
  // No wait: the drain starts, and its result is the importers still attached.
  EXPECT_EQ(ts_.server().DrainGpuImporters(std::chrono::milliseconds(0)), 1u);
  Targets out(2);
  Result<size_t> got =
      GetToDevice(*client_, copier_, ns_.id, keys, out.pointers, kBlockBytes, &pool);
  EXPECT_EQ(got.status().code(), StatusCode::kShuttingDown) << got.status().ToString();
  EXPECT_NE(got.status().message().find("closed and detached"), std::string::npos)
      << got.status().ToString();
  EXPECT_FALSE(pool.mapped());
  EXPECT_EQ(ts_.server().gpu_importers(), 0u);
  EXPECT_EQ(ts_.server().DrainGpuImporters(std::chrono::milliseconds(0)), 0u);
  EXPECT_EQ(copier_.counters().copies, 0u);

  // Until the daemon is gone the client is served without the pool: the closed import is as
  // none, and the GPU block comes inline.
  got = GetToDevice(*client_, copier_, ns_.id, keys, out.pointers, kBlockBytes, &pool);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(out.Block(i), Bytes(kBlockBytes, 70 + i)) << i;
  EXPECT_EQ(copier_.counters().device_to_device_copies, 0u);
  EXPECT_TRUE(ts_.WaitForLeases(0));
}

TEST_F(GpuPoolImportTest, AGetToPagedToldOfTheShutdownClosesTheImportAndDetaches) {
  const PagedShape shape{
      .planes = 8, .blocks = 4, .stride_bytes = 8 << 10, .layer_block_bytes = 8 << 10};
  const std::vector<BlockKey> keys = Place({TierId::kGpu}, 80);
  GpuPoolImport pool = Import();
  EXPECT_EQ(ts_.server().DrainGpuImporters(std::chrono::milliseconds(0)), 1u);
  std::vector<std::byte> cache(shape.total_bytes());
  const uint64_t ids[] = {2};
  Result<size_t> got =
      GetToPaged(*client_, copier_, ns_.id, keys, LayoutOver(cache.data(), shape), ids, &pool);
  EXPECT_EQ(got.status().code(), StatusCode::kShuttingDown) << got.status().ToString();
  EXPECT_FALSE(pool.mapped());
  EXPECT_EQ(ts_.server().gpu_importers(), 0u);
  EXPECT_EQ(copier_.counters().scatters, 0u);
}

// A connection that never attached the pool is served as before while the daemon drains.
TEST_F(GpuPoolImportTest, AGetWithoutThePoolIsNotToldOfTheShutdown) {
  const std::vector<BlockKey> keys = Place({TierId::kHost}, 90);
  EXPECT_EQ(ts_.server().DrainGpuImporters(std::chrono::milliseconds(0)), 0u);
  Targets out(1);
  Result<size_t> got = GetToDevice(*client_, copier_, ns_.id, keys, out.pointers, kBlockBytes);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 1u);
}

TEST(GpuPoolImportWithoutPoolTest, AttachSaysWhyAndTheClientCarriesOn) {
  server::ServerOptions options;
  options.gpu_tier_note = "no GPU tier: disabled in config";
  TestServer ts(options);
  ASSERT_TRUE(ts.status().ok());
  Result<Client> client = Client::Connect("unix://" + ts.unix_path());
  ASSERT_TRUE(client.ok());
  Result<GpuPoolImport> pool = AttachGpuPool(*client);
  EXPECT_EQ(pool.status().code(), StatusCode::kNotFound);
  EXPECT_NE(pool.status().message().find("no GPU tier: disabled in config"), std::string::npos)
      << pool.status().ToString();
  EXPECT_TRUE(client->Ping().ok());

  Result<Client> tcp = Client::Connect("tcp://127.0.0.1:" + std::to_string(ts.tcp_port()));
  ASSERT_TRUE(tcp.ok());
  EXPECT_EQ(AttachGpuPool(*tcp).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::client::gpu
