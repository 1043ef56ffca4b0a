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

struct Case {
  const char* name;
  PagedShape shape;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// A 16-token Llama-8B block (32 layers x K,V of 32 KiB: the 16-byte kernel), and an odd shape
// that forces the byte kernel (lengths and strides not multiples of 16).
const Case kCases[] = {
    {"llama8b_16_tokens",
     {.planes = 64, .blocks = 6, .stride_bytes = 32 << 10, .layer_block_bytes = 32 << 10}},
    {"padded_odd", {.planes = 5, .blocks = 7, .stride_bytes = 1003, .layer_block_bytes = 1000}},
};

class PagedCopyKernelTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    KVTIER_REQUIRE_CUDA_DEVICE();
    const PagedShape& shape = GetParam().shape;
    mirror_ = Bytes(shape.total_bytes(), 11);
    Result<cuda::DeviceBuffer> device = cuda::DeviceBuffer::Allocate(0, mirror_.size());
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(device).value();
    ASSERT_EQ(cudaMemcpy(device_.get(), mirror_.data(), mirror_.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    Result<std::unique_ptr<CudaDeviceCopier>> copier = CudaDeviceCopier::Create(0);
    ASSERT_TRUE(copier.ok()) << copier.status().ToString();
    copier_ = std::move(copier).value();
    host_layout_ = LayoutOver(mirror_.data(), shape);
    device_layout_ = LayoutOver(device_.get(), shape);
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
  for (uint64_t block = 0; block < GetParam().shape.blocks; block += 2) {
    std::vector<std::byte> expected(bytes), to_host(bytes), from_device(bytes);
    ReferenceGather(host_layout_, block, expected.data());
    // Into host memory (staged) and into device memory (direct).
    Result<cuda::DeviceBuffer> flat = cuda::DeviceBuffer::Allocate(0, bytes);
    ASSERT_TRUE(flat.ok());
    ASSERT_TRUE(copier_->Gather(device_layout_, block, to_host.data(), MemoryKind::kHost).ok());
    ASSERT_TRUE(copier_->Gather(device_layout_, block, flat->get(), MemoryKind::kDevice).ok());
    ASSERT_TRUE(
        copier_->Copy(from_device.data(), flat->get(), bytes, CopyDirection::kDeviceToHost).ok());
    ASSERT_TRUE(copier_->Synchronize().ok());
    EXPECT_EQ(to_host, expected) << "block " << block;
    EXPECT_EQ(from_device, expected) << "block " << block;
  }
}

TEST_P(PagedCopyKernelTest, ScatterMatchesTheReference) {
  const uint64_t bytes = host_layout_.block_bytes();
  const std::vector<std::byte> first = Bytes(bytes, 21), second = Bytes(bytes, 22);
  Result<cuda::DeviceBuffer> flat = cuda::DeviceBuffer::Allocate(0, bytes);
  ASSERT_TRUE(flat.ok());
  ASSERT_EQ(cudaMemcpy(flat->get(), second.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(copier_->Scatter(first.data(), MemoryKind::kHost, device_layout_, 1).ok());
  ASSERT_TRUE(copier_->Scatter(flat->get(), MemoryKind::kDevice, device_layout_, 4).ok());
  ASSERT_TRUE(copier_->Synchronize().ok());
  ReferenceScatter(first.data(), host_layout_, 1);
  ReferenceScatter(second.data(), host_layout_, 4);
  // Every byte of device memory equals the mirror: the blocks written, nothing else touched.
  EXPECT_EQ(DeviceMemory(), mirror_);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedCopyKernelTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

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
