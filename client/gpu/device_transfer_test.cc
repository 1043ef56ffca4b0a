// The GPU forms of put and get (device_transfer.h) against a real kvtierd (KVTIERD_PATH, started
// once for the suite on a scratch Unix socket with a 64 MiB host tier), through the shared-memory
// path. Built twice: with the fake copier, "device" memory being host memory (label integration,
// every machine), and with KVTIER_TEST_CUDA_COPIER, real device memory and CudaDeviceCopier
// (label gpu).
#include "client/gpu/device_transfer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/gpu/fake_device_copier.h"
#include "client/gpu/paged_test_util.h"
#include "client/gpu/test_device_memory.h"
#include "client/testing/spawned_kvtierd.h"
#if KVTIER_TEST_CUDA_COPIER
#include <cuda_runtime_api.h>

#include "common/cuda/cuda_handles.h"
#include "tests/gpu/gpu_test_support.h"
#endif

namespace kvtier::client::gpu {
namespace {

using testing::Bytes;
using testing::LayoutOver;
using testing::PagedShape;

constexpr uint64_t kBlockBytes = 64 << 10;
#if KVTIER_TEST_CUDA_COPIER
constexpr bool kCudaCopier = true;
#else
constexpr bool kCudaCopier = false;
#endif

using testing::DeviceMemory;

// The engine's work on its own stream, queued before a transfer and not yet run when the transfer
// is called: it fills `bytes` at `dst` with `value`. The fake copier runs it when a copy is
// ordered after its stream or event; on a GPU it is a memset queued behind a host callback that
// sleeps, so a copy that does not wait for the stream sees (or is overwritten by) the bytes from
// before. Finish() lets the rest of the engine's work run, as the GPU eventually does.
class CallerWork {
 public:
  CallerWork(DeviceCopier& copier, void* dst, size_t bytes, uint8_t value, bool use_event)
      : copier_(copier), use_event_(use_event) {
#if KVTIER_TEST_CUDA_COPIER
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(
        cudaLaunchHostFunc(
            stream_, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); },
            nullptr),
        cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(dst, value, bytes, stream_), cudaSuccess);
    if (use_event_) {
      EXPECT_EQ(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), cudaSuccess);
      EXPECT_EQ(cudaEventRecord(event_, stream_), cudaSuccess);
    }
#else
    static_cast<FakeDeviceCopier&>(copier_).QueueCallerWork(
        use_event ? &event_name_ : &stream_name_, [=] { std::memset(dst, value, bytes); });
#endif
  }
  ~CallerWork() { Finish(); }

  CallerStream caller() const {
#if KVTIER_TEST_CUDA_COPIER
    return use_event_ ? CallerStream{.event = event_} : CallerStream{.stream = stream_};
#else
    return use_event_
               ? CallerStream{.event =
                                  reinterpret_cast<CUevent_st*>(const_cast<char*>(&event_name_))}
               : CallerStream{.stream =
                                  reinterpret_cast<CUstream_st*>(const_cast<char*>(&stream_name_))};
#endif
  }

  void Finish() {
#if KVTIER_TEST_CUDA_COPIER
    if (stream_ == nullptr) return;
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    if (event_ != nullptr) (void)cudaEventDestroy(std::exchange(event_, nullptr));
    (void)cudaStreamDestroy(std::exchange(stream_, nullptr));
#else
    // Whatever no copy was ordered after runs now, late, as it would on a device.
    (void)copier_.OrderAfter(caller());
#endif
  }

 private:
  DeviceCopier& copier_;
  bool use_event_;
#if KVTIER_TEST_CUDA_COPIER
  cudaStream_t stream_ = nullptr;
  cudaEvent_t event_ = nullptr;
#else
  char stream_name_ = 0;
  char event_name_ = 0;
#endif
};

class DeviceTransferTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { daemon_.Start(KVTIERD_PATH, "gpu-it"); }
  static void TearDownTestSuite() { daemon_.Stop(); }

  void SetUp() override {
#if KVTIER_TEST_CUDA_COPIER
    KVTIER_REQUIRE_CUDA_DEVICE();
#endif
    Result<std::unique_ptr<DeviceCopier>> copier = MakeDeviceCopier({.fake = !kCudaCopier});
    ASSERT_TRUE(copier.ok()) << copier.status().ToString();
    copier_ = std::move(copier).value();
    Result<Client> client = Client::Connect(daemon_.url());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::make_unique<Client>(std::move(client).value());
    ASSERT_TRUE(client_->Attach().ok());
    pinned_ = PinArena(*client_);
#if KVTIER_TEST_CUDA_COPIER
    ASSERT_TRUE(pinned_.pinned()) << pinned_.status().ToString();
#endif
    Result<NamespaceInfo> ns =
        client::testing::RegisterTestNamespace(*client_, "gpu-transfer", kBlockBytes);
    ASSERT_TRUE(ns.ok()) << ns.status().ToString();
    ns_ = *ns;
  }

  std::vector<BlockKey> Keys(size_t n, uint32_t seed) {
    return client::testing::TestKeys(ns_, n, seed);
  }

  static inline client::testing::SpawnedKvtierd daemon_;
  std::unique_ptr<DeviceCopier> copier_;
  std::unique_ptr<Client> client_;
  // Declared after client_ so that it is destroyed first: unregister, then unmap.
  cuda::PinnedHostRange pinned_;
  NamespaceInfo ns_;
};

// The two builds of this file need distinct suite names: ctest lists both binaries' tests.
#if KVTIER_TEST_CUDA_COPIER
using CudaDeviceTransferTest = DeviceTransferTest;
#define TRANSFER_TEST(name) TEST_F(CudaDeviceTransferTest, name)
#else
#define TRANSFER_TEST(name) TEST_F(DeviceTransferTest, name)
#endif

TRANSFER_TEST(ContiguousBlocksRoundTrip) {
  const std::vector<BlockKey> keys = Keys(4, 1);
  DeviceMemory source(4 * kBlockBytes), target(4 * kBlockBytes);
  const std::vector<std::byte> bytes = Bytes(4 * kBlockBytes, 1);
  source.Upload(bytes);
  std::vector<const void*> src;
  std::vector<void*> dst;
  for (size_t i = 0; i < 4; ++i) {
    src.push_back(source.get() + i * kBlockBytes);
    dst.push_back(target.get() + i * kBlockBytes);
  }
  Result<std::vector<Status>> put =
      PutFromDevice(*client_, *copier_, ns_.id, keys, src, kBlockBytes);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (const Status& s : *put) EXPECT_TRUE(s.ok()) << s.ToString();
  Result<size_t> got = GetToDevice(*client_, *copier_, ns_.id, keys, dst, kBlockBytes);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 4u);
  EXPECT_EQ(target.Download(0, bytes.size()), bytes);
  // A second put of the same blocks has nothing to do.
  Result<std::vector<Status>> again =
      PutFromDevice(*client_, *copier_, ns_.id, keys, src, kBlockBytes);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].code(), StatusCode::kAlreadyExists);
}

TRANSFER_TEST(PagedBlocksGatherIntoSlotsAndScatterBack) {
  // 8 planes of 8 KiB per block = one 64 KiB block; 8 blocks per plane, 16 KiB stride.
  const PagedShape shape{
      .planes = 8, .blocks = 8, .stride_bytes = 16 << 10, .layer_block_bytes = 8 << 10};
  const std::vector<std::byte> engine_bytes = Bytes(shape.total_bytes(), 2);
  DeviceMemory engine(shape.total_bytes()), restored(shape.total_bytes());
  engine.Upload(engine_bytes);
  restored.Upload(std::vector<std::byte>(shape.total_bytes()));
  const PagedKvLayout layout = LayoutOver(engine.get(), shape);
  ASSERT_EQ(layout.block_bytes(), kBlockBytes);
  const std::vector<BlockKey> keys = Keys(3, 2);
  const uint64_t put_ids[] = {5, 2, 7};
  Result<std::vector<Status>> put = PutFromPaged(*client_, *copier_, ns_.id, keys, layout, put_ids);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (const Status& s : *put) EXPECT_TRUE(s.ok()) << s.ToString();

  // The stored block is the plane-by-plane gather: read it back plainly through the arena.
  std::vector<std::byte> stored(kBlockBytes), expected(kBlockBytes);
  void* plain[] = {stored.data()};
  ASSERT_EQ(*client_->Get(ns_.id, std::span(keys).first(1), plain, kBlockBytes), 1u);
  ReferenceGather(LayoutOver(const_cast<std::byte*>(engine_bytes.data()), shape), 5,
                  expected.data());
  EXPECT_EQ(stored, expected);

  // Scattered into other block ids of a zeroed cache: exactly those slices change.
  const PagedKvLayout restored_layout = LayoutOver(restored.get(), shape);
  const uint64_t get_ids[] = {0, 1, 3};
  Result<size_t> got = GetToPaged(*client_, *copier_, ns_.id, keys, restored_layout, get_ids);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(*got, 3u);
  std::vector<std::byte> mirror(shape.total_bytes());
  const PagedKvLayout mirror_layout = LayoutOver(mirror.data(), shape);
  const PagedKvLayout source_layout =
      LayoutOver(const_cast<std::byte*>(engine_bytes.data()), shape);
  for (size_t i = 0; i < 3; ++i) {
    std::vector<std::byte> block(kBlockBytes);
    ReferenceGather(source_layout, put_ids[i], block.data());
    ReferenceScatter(block.data(), mirror_layout, get_ids[i]);
  }
  EXPECT_EQ(restored.Download(0, shape.total_bytes()), mirror);
}

TRANSFER_TEST(AMissEndsThePrefix) {
  const std::vector<BlockKey> keys = Keys(3, 3);
  DeviceMemory memory(3 * kBlockBytes);
  memory.Upload(Bytes(3 * kBlockBytes, 3));
  const void* src[] = {memory.get()};
  ASSERT_TRUE(
      PutFromDevice(*client_, *copier_, ns_.id, std::span(keys).first(1), src, kBlockBytes).ok());
  void* dst[] = {memory.get(), memory.get() + kBlockBytes, memory.get() + 2 * kBlockBytes};
  Result<size_t> got = GetToDevice(*client_, *copier_, ns_.id, keys, dst, kBlockBytes);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 1u);
}

// A paged put and get hand the copier all their blocks as one batch; a miss in the middle of a
// get ends the prefix: the blocks before it are scattered, the ones after it not touched, even
// though the daemon leased them.
TRANSFER_TEST(PagedBlocksGoAsOneBatchAndAMissInTheMiddleEndsIt) {
  const PagedShape shape{
      .planes = 8, .blocks = 8, .stride_bytes = 16 << 10, .layer_block_bytes = 8 << 10};
  const std::vector<std::byte> engine_bytes = Bytes(shape.total_bytes(), 9);
  DeviceMemory engine(shape.total_bytes()), restored(shape.total_bytes());
  engine.Upload(engine_bytes);
  restored.Upload(std::vector<std::byte>(shape.total_bytes()));
  const std::vector<BlockKey> keys = Keys(5, 9);
  // Every key but the third is stored.
  const std::vector<BlockKey> stored_keys = {keys[0], keys[1], keys[3], keys[4]};
  const uint64_t put_ids[] = {4, 0, 6, 2};
  auto* fake = copier_->fake() ? static_cast<FakeDeviceCopier*>(copier_.get()) : nullptr;
  const uint64_t batches_before = fake != nullptr ? fake->counters().paged_batches : 0;
  Result<std::vector<Status>> put = PutFromPaged(*client_, *copier_, ns_.id, stored_keys,
                                                 LayoutOver(engine.get(), shape), put_ids);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (const Status& s : *put) ASSERT_TRUE(s.ok()) << s.ToString();
  if (fake != nullptr) {
    EXPECT_EQ(fake->counters().paged_batches, batches_before + 1);
  }

  const uint64_t get_ids[] = {1, 3, 5, 7, 2};
  Result<size_t> got =
      GetToPaged(*client_, *copier_, ns_.id, keys, LayoutOver(restored.get(), shape), get_ids);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 2u);
  if (fake != nullptr) {
    EXPECT_EQ(fake->counters().paged_batches, batches_before + 2);
    EXPECT_EQ(fake->counters().scatters, 2u);
  }
  std::vector<std::byte> mirror(shape.total_bytes());
  const PagedKvLayout source = LayoutOver(const_cast<std::byte*>(engine_bytes.data()), shape);
  for (size_t i = 0; i < 2; ++i) {
    std::vector<std::byte> block(kBlockBytes);
    ReferenceGather(source, put_ids[i], block.data());
    ReferenceScatter(block.data(), LayoutOver(mirror.data(), shape), get_ids[i]);
  }
  EXPECT_EQ(restored.Download(0, shape.total_bytes()), mirror);
}

TRANSFER_TEST(MismatchedArgumentsAreInvalid) {
  const std::vector<BlockKey> keys = Keys(2, 4);
  DeviceMemory memory(kBlockBytes);
  const void* one[] = {memory.get()};
  EXPECT_EQ(PutFromDevice(*client_, *copier_, ns_.id, keys, one, kBlockBytes).status().code(),
            StatusCode::kInvalidArgument);
  const void* null_block[] = {memory.get(), nullptr};
  EXPECT_EQ(
      PutFromDevice(*client_, *copier_, ns_.id, keys, null_block, kBlockBytes).status().code(),
      StatusCode::kInvalidArgument);
  const uint64_t ids[] = {0, 1};
  EXPECT_EQ(PutFromPaged(*client_, *copier_, ns_.id, keys, PagedKvLayout{}, ids).status().code(),
            StatusCode::kInvalidArgument);
}

// The caller's stream ordering: a put stores what the engine's queued work wrote, a get's bytes
// are not overwritten by the engine's work queued before it. Each would fail if the copies did not
// wait for the caller's stream or event.
TRANSFER_TEST(PutFromDeviceIsOrderedAfterTheCallersStream) {
  const std::vector<BlockKey> keys = Keys(2, 7);
  DeviceMemory memory(2 * kBlockBytes);
  memory.Upload(std::vector<std::byte>(2 * kBlockBytes));
  CallerWork work(*copier_, memory.get(), 2 * kBlockBytes, 0xAB, /*use_event=*/false);
  const void* src[] = {memory.get(), memory.get() + kBlockBytes};
  Result<std::vector<Status>> put =
      PutFromDevice(*client_, *copier_, ns_.id, keys, src, kBlockBytes, work.caller());
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (const Status& s : *put) ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<std::byte> stored(2 * kBlockBytes);
  void* plain[] = {stored.data(), stored.data() + kBlockBytes};
  ASSERT_EQ(*client_->Get(ns_.id, keys, plain, kBlockBytes), 2u);
  EXPECT_EQ(stored, std::vector<std::byte>(2 * kBlockBytes, std::byte{0xAB}));
}

TRANSFER_TEST(PutFromPagedIsOrderedAfterTheCallersEvent) {
  const PagedShape shape{
      .planes = 8, .blocks = 4, .stride_bytes = 8 << 10, .layer_block_bytes = 8 << 10};
  DeviceMemory engine(shape.total_bytes());
  engine.Upload(std::vector<std::byte>(shape.total_bytes()));
  CallerWork work(*copier_, engine.get(), shape.total_bytes(), 0xCD, /*use_event=*/true);
  const std::vector<BlockKey> keys = Keys(1, 8);
  const uint64_t ids[] = {2};
  Result<std::vector<Status>> put = PutFromPaged(
      *client_, *copier_, ns_.id, keys, LayoutOver(engine.get(), shape), ids, work.caller());
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  ASSERT_TRUE((*put)[0].ok()) << (*put)[0].ToString();
  std::vector<std::byte> stored(kBlockBytes);
  void* plain[] = {stored.data()};
  ASSERT_EQ(*client_->Get(ns_.id, keys, plain, kBlockBytes), 1u);
  EXPECT_EQ(stored, std::vector<std::byte>(kBlockBytes, std::byte{0xCD}));
}

TRANSFER_TEST(GetToDeviceIsOrderedAfterTheCallersStream) {
  const std::vector<BlockKey> keys = Keys(1, 9);
  const std::vector<std::byte> bytes = Bytes(kBlockBytes, 9);
  const void* plain[] = {bytes.data()};
  ASSERT_TRUE(client_->Put(ns_.id, keys, plain, kBlockBytes)->at(0).ok());
  DeviceMemory target(kBlockBytes);
  CallerWork work(*copier_, target.get(), kBlockBytes, 0xEE, /*use_event=*/false);
  void* dst[] = {target.get()};
  Result<size_t> got =
      GetToDevice(*client_, *copier_, ns_.id, keys, dst, kBlockBytes, nullptr, work.caller());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(*got, 1u);
  work.Finish();
  EXPECT_EQ(target.Download(0, kBlockBytes), bytes);
}

TRANSFER_TEST(GetToPagedIsOrderedAfterTheCallersEvent) {
  const PagedShape shape{
      .planes = 8, .blocks = 4, .stride_bytes = 8 << 10, .layer_block_bytes = 8 << 10};
  const std::vector<BlockKey> keys = Keys(1, 10);
  const std::vector<std::byte> bytes = Bytes(kBlockBytes, 10);
  const void* plain[] = {bytes.data()};
  ASSERT_TRUE(client_->Put(ns_.id, keys, plain, kBlockBytes)->at(0).ok());
  DeviceMemory engine(shape.total_bytes());
  CallerWork work(*copier_, engine.get(), shape.total_bytes(), 0xEE, /*use_event=*/true);
  const uint64_t ids[] = {3};
  const PagedKvLayout layout = LayoutOver(engine.get(), shape);
  Result<size_t> got =
      GetToPaged(*client_, *copier_, ns_.id, keys, layout, ids, nullptr, work.caller());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(*got, 1u);
  work.Finish();
  std::vector<std::byte> expected(shape.total_bytes(), std::byte{0xEE});
  ReferenceScatter(bytes.data(), LayoutOver(expected.data(), shape), 3);
  EXPECT_EQ(engine.Download(0, shape.total_bytes()), expected);
}

#if !KVTIER_TEST_CUDA_COPIER
// Copy failures, injected in the fake copier: the failed blocks are aborted, never committed.
TRANSFER_TEST(AFailedCopyAbortsItsReservation) {
  auto& fake = static_cast<FakeDeviceCopier&>(*copier_);
  const std::vector<BlockKey> keys = Keys(3, 5);
  DeviceMemory memory(3 * kBlockBytes);
  memory.Upload(Bytes(3 * kBlockBytes, 5));
  const void* src[] = {memory.get(), memory.get() + kBlockBytes, memory.get() + 2 * kBlockBytes};
  fake.FailNext(1);  // the first block's copy
  Result<std::vector<Status>> put = PutFromDevice(*client_, fake, ns_.id, keys, src, kBlockBytes);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ((*put)[0].code(), StatusCode::kDeviceError);
  EXPECT_TRUE((*put)[1].ok());
  EXPECT_TRUE((*put)[2].ok());
  EXPECT_EQ(client_->Lookup(ns_.id, keys)->prefix, 0u);
  EXPECT_EQ(client_->Lookup(ns_.id, std::span(keys).subspan(1))->prefix, 2u);
  EXPECT_EQ(client_->counters().aborted_puts, 1u);
}

TRANSFER_TEST(AFailedWaitAbortsEveryBlockAndFailsTheGet) {
  auto& fake = static_cast<FakeDeviceCopier&>(*copier_);
  const std::vector<BlockKey> keys = Keys(2, 6);
  DeviceMemory memory(2 * kBlockBytes);
  memory.Upload(Bytes(2 * kBlockBytes, 6));
  const void* src[] = {memory.get(), memory.get() + kBlockBytes};
  void* dst[] = {memory.get(), memory.get() + kBlockBytes};
  // Both copies are queued, the synchronisation fails: nothing may be committed.
  struct FailingWait : DeviceCopier {
    explicit FailingWait(DeviceCopier& inner) : inner(inner) {}
    bool fake() const override { return true; }
    int device() const override { return -1; }
    Status OrderAfter(const CallerStream& c) override { return inner.OrderAfter(c); }
    Status Copy(void* d, const void* s, size_t n, CopyDirection k) override {
      return inner.Copy(d, s, n, k);
    }
    Status GatherBlocks(const PagedKvLayout& l, std::span<const PagedBlockCopy> e) override {
      return inner.GatherBlocks(l, e);
    }
    Status ScatterBlocks(std::span<const PagedBlockCopy> e, const PagedKvLayout& l) override {
      return inner.ScatterBlocks(e, l);
    }
    Status Synchronize() override { return DeviceError("injected"); }
    DeviceCopier& inner;
  } failing(fake);
  Result<std::vector<Status>> put =
      PutFromDevice(*client_, failing, ns_.id, keys, src, kBlockBytes);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ((*put)[0].code(), StatusCode::kDeviceError);
  EXPECT_EQ((*put)[1].code(), StatusCode::kDeviceError);
  EXPECT_EQ(client_->Lookup(ns_.id, keys)->prefix, 0u);
  // Stored properly, then a get whose wait fails: an error, and the leases are released (a
  // second get with a working copier serves both).
  ASSERT_TRUE(PutFromDevice(*client_, fake, ns_.id, keys, src, kBlockBytes).ok());
  EXPECT_EQ(GetToDevice(*client_, failing, ns_.id, keys, dst, kBlockBytes).status().code(),
            StatusCode::kDeviceError);
  EXPECT_EQ(*GetToDevice(*client_, fake, ns_.id, keys, dst, kBlockBytes), 2u);
}

// A launch that fails after its staging copy was queued (a scatter's host-to-device copy out of
// the slot, then a kernel launch error) leaves DMA in flight: the client must wait for it before
// it aborts the reservation or releases the lease, even when no block was started successfully.
TRANSFER_TEST(AFailedLaunchOfAPutIsWaitedForBeforeTheAbort) {
  auto& fake = static_cast<FakeDeviceCopier&>(*copier_);
  fake.set_deferred(true);
  const PagedShape shape{
      .planes = 8, .blocks = 2, .stride_bytes = 8 << 10, .layer_block_bytes = 8 << 10};
  DeviceMemory engine(shape.total_bytes());
  engine.Upload(Bytes(shape.total_bytes(), 11));
  const std::vector<BlockKey> keys = Keys(1, 11);
  const uint64_t ids[] = {1};
  fake.FailNextAfterQueueing(1);
  Result<std::vector<Status>> put =
      PutFromPaged(*client_, fake, ns_.id, keys, LayoutOver(engine.get(), shape), ids);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ((*put)[0].code(), StatusCode::kDeviceError);
  EXPECT_EQ(fake.in_flight(), 0u) << "the reservation was aborted with a copy in flight";
  EXPECT_EQ(client_->Lookup(ns_.id, keys)->prefix, 0u);
  EXPECT_EQ(client_->counters().aborted_puts, 1u);
}

TRANSFER_TEST(AFailedLaunchOfAGetIsWaitedForBeforeTheRelease) {
  auto& fake = static_cast<FakeDeviceCopier&>(*copier_);
  const std::vector<BlockKey> keys = Keys(2, 12);
  const std::vector<std::byte> bytes = Bytes(2 * kBlockBytes, 12);
  const void* plain[] = {bytes.data(), bytes.data() + kBlockBytes};
  ASSERT_TRUE(client_->Put(ns_.id, keys, plain, kBlockBytes).ok());
  const PagedShape shape{
      .planes = 8, .blocks = 2, .stride_bytes = 8 << 10, .layer_block_bytes = 8 << 10};
  DeviceMemory engine(shape.total_bytes());
  const uint64_t ids[] = {0, 1};
  fake.set_deferred(true);
  fake.FailNextAfterQueueing(1);  // the first block: nothing is served
  Result<size_t> got =
      GetToPaged(*client_, fake, ns_.id, keys, LayoutOver(engine.get(), shape), ids);
  EXPECT_EQ(got.status().code(), StatusCode::kDeviceError);
  EXPECT_EQ(fake.in_flight(), 0u) << "a lease was released with a copy out of its slot in flight";
  // The leases were released: a second get serves both.
  EXPECT_EQ(*GetToPaged(*client_, fake, ns_.id, keys, LayoutOver(engine.get(), shape), ids), 2u);
}

TRANSFER_TEST(AFailedOrderingFailsTheCallBeforeAnythingIsReserved) {
  auto& fake = static_cast<FakeDeviceCopier&>(*copier_);
  const std::vector<BlockKey> keys = Keys(1, 13);
  DeviceMemory memory(kBlockBytes);
  const void* src[] = {memory.get()};
  fake.FailNextOrderAfter();
  EXPECT_EQ(PutFromDevice(*client_, fake, ns_.id, keys, src, kBlockBytes).status().code(),
            StatusCode::kDeviceError);
  EXPECT_EQ(fake.counters().copies, 0u);
  EXPECT_EQ(client_->Lookup(ns_.id, keys)->prefix, 0u);
}
#endif

}  // namespace
}  // namespace kvtier::client::gpu
