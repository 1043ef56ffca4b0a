// The CUDA paged gather/scatter (CudaDeviceCopier and its kernel) against the CPU reference, on
// the same layout in device memory and in a host mirror.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "client/gpu/cuda_device_copier.h"
#include "client/gpu/paged_test_util.h"
#include "common/cuda/cuda_handles.h"
#include "tests/gpu/gpu_test_support.h"

namespace kvtier::client::gpu {
namespace {

using testing::Bytes;
using testing::LayoutOver;
using testing::PagedShape;

using testing::kPagedCopyCases;
using testing::PagedCase;

// Every shape of kPagedCopyCases (aligned words of 16, 8 and 4 bytes, the shifted fallback,
// blocks under one word), in device memory and in a host mirror that the reference works on.
class PagedCopyKernelTest : public ::testing::TestWithParam<PagedCase> {
 protected:
  void SetUp() override {
    KVTIER_REQUIRE_CUDA_DEVICE();
    const PagedCase& c = GetParam();
    mirror_ = Bytes(c.base_offset + c.shape.total_bytes(), 11);
    device_ = Allocate(mirror_.size());
    ASSERT_EQ(cudaMemcpy(device_.get(), mirror_.data(), mirror_.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    Result<std::unique_ptr<CudaDeviceCopier>> copier = CudaDeviceCopier::Create(0);
    ASSERT_TRUE(copier.ok()) << copier.status().ToString();
    copier_ = std::move(copier).value();
    host_layout_ = LayoutOver(mirror_.data() + c.base_offset, c.shape);
    device_layout_ = LayoutOver(device_.get() + c.base_offset, c.shape);
  }

  static cuda::DeviceBuffer Allocate(size_t bytes) {
    Result<cuda::DeviceBuffer> buffer = cuda::DeviceBuffer::Allocate(0, bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
    return buffer.ok() ? std::move(buffer).value() : cuda::DeviceBuffer();
  }

  std::vector<std::byte> DeviceMemory() {
    std::vector<std::byte> out(mirror_.size());
    EXPECT_EQ(cudaMemcpy(out.data(), device_.get(), out.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

  std::vector<std::byte> mirror_;
  cuda::DeviceBuffer device_;
  std::unique_ptr<CudaDeviceCopier> copier_;
  PagedKvLayout host_layout_, device_layout_;
};

TEST_P(PagedCopyKernelTest, GatherMatchesTheReference) {
  const uint64_t bytes = host_layout_.block_bytes();
  const size_t offset = GetParam().flat_offset;
  for (uint64_t block = 0; block < GetParam().shape.blocks; block += 2) {
    std::vector<std::byte> expected(bytes), to_host(offset + bytes), from_device(bytes);
    ReferenceGather(host_layout_, block, expected.data());
    // Into host memory (staged) and into device memory (direct), both at the case's offset.
    cuda::DeviceBuffer flat = Allocate(offset + bytes);
    ASSERT_TRUE(
        copier_->Gather(device_layout_, block, to_host.data() + offset, MemoryKind::kHost).ok());
    ASSERT_TRUE(
        copier_->Gather(device_layout_, block, flat.get() + offset, MemoryKind::kDevice).ok());
    ASSERT_TRUE(
        copier_->Copy(from_device.data(), flat.get() + offset, bytes, CopyDirection::kDeviceToHost)
            .ok());
    ASSERT_TRUE(copier_->Synchronize().ok());
    EXPECT_EQ(std::vector<std::byte>(to_host.begin() + offset, to_host.end()), expected)
        << "block " << block;
    EXPECT_EQ(from_device, expected) << "block " << block;
  }
}

TEST_P(PagedCopyKernelTest, ScatterMatchesTheReference) {
  const uint64_t bytes = host_layout_.block_bytes();
  const std::vector<std::byte> first = Bytes(bytes, 21), second = Bytes(bytes, 22);
  cuda::DeviceBuffer flat = Allocate(bytes);
  ASSERT_EQ(cudaMemcpy(flat.get(), second.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(copier_->Scatter(first.data(), MemoryKind::kHost, device_layout_, 1).ok());
  ASSERT_TRUE(copier_->Scatter(flat.get(), MemoryKind::kDevice, device_layout_, 4).ok());
  ASSERT_TRUE(copier_->Synchronize().ok());
  ReferenceScatter(first.data(), host_layout_, 1);
  ReferenceScatter(second.data(), host_layout_, 4);
  // Every byte of device memory equals the mirror: the blocks written, nothing else touched.
  EXPECT_EQ(DeviceMemory(), mirror_);
}

// One batch of every block in a scattered order, host and device entries alternating: gathered,
// compared with the reference, then scattered back into other blocks.
TEST_P(PagedCopyKernelTest, ABatchOfBlocksMatchesTheReference) {
  const PagedCase& c = GetParam();
  const uint64_t bytes = host_layout_.block_bytes();
  const size_t offset = c.flat_offset;
  const size_t count = c.shape.blocks;
  std::vector<std::vector<std::byte>> host(count, std::vector<std::byte>(offset + bytes));
  cuda::DeviceBuffer device = Allocate(count * (offset + bytes));
  std::vector<PagedBlockCopy> entries;
  for (size_t i = 0; i < count; ++i) {
    const bool on_host = i % 2 == 0;
    entries.push_back({.block_id = count - 1 - i,
                       .contiguous = on_host ? host[i].data() + offset
                                             : device.get() + i * (offset + bytes) + offset,
                       .kind = on_host ? MemoryKind::kHost : MemoryKind::kDevice});
  }
  ASSERT_TRUE(copier_->GatherBlocks(device_layout_, entries).ok());
  ASSERT_TRUE(copier_->Synchronize().ok());
  std::vector<std::byte> expected(bytes), got(bytes);
  for (size_t i = 0; i < count; ++i) {
    ReferenceGather(host_layout_, entries[i].block_id, expected.data());
    ASSERT_EQ(cudaMemcpy(got.data(), entries[i].contiguous, bytes, cudaMemcpyDefault), cudaSuccess);
    EXPECT_EQ(got, expected) << "entry " << i;
  }
  // Back into the block after each one's source: the whole device memory equals the mirror.
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(cudaMemcpy(got.data(), entries[i].contiguous, bytes, cudaMemcpyDefault), cudaSuccess);
    entries[i].block_id = (entries[i].block_id + 1) % count;
    ReferenceScatter(got.data(), host_layout_, entries[i].block_id);
  }
  ASSERT_TRUE(copier_->ScatterBlocks(entries, device_layout_).ok());
  ASSERT_TRUE(copier_->Synchronize().ok());
  EXPECT_EQ(DeviceMemory(), mirror_);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedCopyKernelTest, ::testing::ValuesIn(kPagedCopyCases),
                         [](const ::testing::TestParamInfo<PagedCase>& info) {
                           return std::string(info.param.name);
                         });

// More blocks than one launch takes, through a staging buffer of three blocks: several launches
// reuse the staging places in stream order.
TEST(CudaDeviceCopierTest, ABatchLargerThanALaunchAndTheStaging) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  const PagedShape shape{
      .planes = 4, .blocks = 150, .stride_bytes = 1024, .layer_block_bytes = 512};
  const uint64_t bytes = shape.planes * shape.layer_block_bytes;
  Result<std::unique_ptr<CudaDeviceCopier>> copier =
      CudaDeviceCopier::Create(0, {.max_staging_bytes = 3 * bytes});
  ASSERT_TRUE(copier.ok());
  std::vector<std::byte> mirror = Bytes(shape.total_bytes(), 31);
  Result<cuda::DeviceBuffer> memory = cuda::DeviceBuffer::Allocate(0, mirror.size());
  Result<cuda::DeviceBuffer> flat = cuda::DeviceBuffer::Allocate(0, shape.blocks * bytes);
  ASSERT_TRUE(memory.ok() && flat.ok());
  ASSERT_EQ(cudaMemcpy(memory->get(), mirror.data(), mirror.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  std::vector<std::byte> host(shape.blocks * bytes);
  std::vector<PagedBlockCopy> entries;
  for (uint64_t i = 0; i < shape.blocks; ++i) {
    const bool on_host = i % 4 != 0;
    entries.push_back({.block_id = (i * 37) % shape.blocks,
                       .contiguous = (on_host ? host.data() : flat->get()) + i * bytes,
                       .kind = on_host ? MemoryKind::kHost : MemoryKind::kDevice});
  }
  ASSERT_TRUE((*copier)->GatherBlocks(LayoutOver(memory->get(), shape), entries).ok());
  ASSERT_TRUE((*copier)->Synchronize().ok());
  const PagedKvLayout host_layout = LayoutOver(mirror.data(), shape);
  std::vector<std::byte> expected(bytes), got(bytes);
  for (size_t i = 0; i < entries.size(); ++i) {
    ReferenceGather(host_layout, entries[i].block_id, expected.data());
    ASSERT_EQ(cudaMemcpy(got.data(), entries[i].contiguous, bytes, cudaMemcpyDefault), cudaSuccess);
    ASSERT_EQ(got, expected) << "entry " << i;
  }
}

TEST(CudaDeviceCopierTest, RejectsBadLayoutsBeforeLaunching) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  Result<std::unique_ptr<CudaDeviceCopier>> copier = CudaDeviceCopier::Create(0);
  ASSERT_TRUE(copier.ok());
  std::byte dst[16];
  EXPECT_EQ((*copier)->Gather(PagedKvLayout{}, 0, dst, MemoryKind::kHost).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE((*copier)->Synchronize().ok());
}

// An error an earlier, unrelated CUDA call left behind (here a refused allocation, as after a
// refused cudaHostRegister or a failed import) must not fail the next gather or scatter: a launch
// learns its outcome from cudaGetLastError, which returned the stale error before the fix.
TEST(CudaDeviceCopierTest, AStaleErrorDoesNotFailTheNextLaunch) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  Result<std::unique_ptr<CudaDeviceCopier>> copier = CudaDeviceCopier::Create(0);
  ASSERT_TRUE(copier.ok());
  const PagedShape shape{.planes = 4, .blocks = 2, .stride_bytes = 4096, .layer_block_bytes = 4096};
  Result<cuda::DeviceBuffer> memory = cuda::DeviceBuffer::Allocate(0, shape.total_bytes());
  Result<cuda::DeviceBuffer> flat = cuda::DeviceBuffer::Allocate(0, 4 * 4096);
  ASSERT_TRUE(memory.ok() && flat.ok());
  const PagedKvLayout layout = LayoutOver(memory->get(), shape);
  std::vector<std::byte> host(layout.block_bytes());
  for (int round = 0; round < 2; ++round) {
    void* huge = nullptr;
    ASSERT_NE(cudaMalloc(&huge, size_t{1} << 60), cudaSuccess);  // leaves its error behind
    EXPECT_TRUE((*copier)->Gather(layout, 1, flat->get(), MemoryKind::kDevice).ok());
    ASSERT_NE(cudaMalloc(&huge, size_t{1} << 60), cudaSuccess);
    EXPECT_TRUE((*copier)->Scatter(flat->get(), MemoryKind::kDevice, layout, 0).ok());
    ASSERT_NE(cudaMalloc(&huge, size_t{1} << 60), cudaSuccess);
    EXPECT_TRUE((*copier)->Gather(layout, 0, host.data(), MemoryKind::kHost).ok());
    EXPECT_TRUE((*copier)->Synchronize().ok());
  }
}

// OrderAfter takes the caller's stream and the caller's event, the legacy default stream included;
// the copies after it see what the caller's stream wrote (device_transfer_cuda_test has the
// ordering through the client).
TEST(CudaDeviceCopierTest, OrderAfterWaitsForTheCallersStreamOrEvent) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  Result<std::unique_ptr<CudaDeviceCopier>> copier = CudaDeviceCopier::Create(0);
  ASSERT_TRUE(copier.ok());
  Result<cuda::DeviceBuffer> memory = cuda::DeviceBuffer::Allocate(0, 1 << 20);
  ASSERT_TRUE(memory.ok());
  Result<cuda::Stream> stream = cuda::Stream::Create(0);
  ASSERT_TRUE(stream.ok());
  std::vector<std::byte> host(1 << 20);
  for (int value : {0x11, 0x22, 0x33}) {
    ASSERT_EQ(
        cudaLaunchHostFunc(
            stream->get(),
            [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }, nullptr),
        cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(memory->get(), value, 1 << 20, stream->get()), cudaSuccess);
    CallerStream caller{.stream = stream->get()};
    cudaEvent_t event = nullptr;
    if (value == 0x22) {
      ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
      ASSERT_EQ(cudaEventRecord(event, stream->get()), cudaSuccess);
      caller = {.event = event};
    }
    ASSERT_TRUE((*copier)->OrderAfter(caller).ok());
    ASSERT_TRUE((*copier)
                    ->Copy(host.data(), memory->get(), host.size(), CopyDirection::kDeviceToHost)
                    .ok());
    ASSERT_TRUE((*copier)->Synchronize().ok());
    EXPECT_EQ(host, std::vector<std::byte>(host.size(), std::byte(value))) << value;
    if (event != nullptr) (void)cudaEventDestroy(event);
  }
  EXPECT_TRUE((*copier)->OrderAfter({}).ok());  // the legacy default stream
}

}  // namespace
}  // namespace kvtier::client::gpu
