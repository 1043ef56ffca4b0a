#include "common/cuda/pinned_host_range.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "common/cuda/cuda_handles.h"
#include "tests/gpu/gpu_test_support.h"

namespace kvtier::cuda {
namespace {

constexpr size_t kBytes = size_t{8} << 20;

// Shared anonymous memory, like the host arena's memfd mapping.
struct Mapping {
  Mapping() {
    base = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  }
  ~Mapping() { ::munmap(base, kBytes); }
  void* base;
};

TEST(PinnedHostRangeTest, RegistersAndUnregistersASharedMapping) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  Mapping mapping;
  ASSERT_NE(mapping.base, MAP_FAILED);
  {
    PinnedHostRange range = PinnedHostRange::Register(mapping.base, kBytes);
    ASSERT_TRUE(range.pinned()) << range.status().ToString();
    cudaPointerAttributes attributes{};
    ASSERT_EQ(cudaPointerGetAttributes(&attributes, mapping.base), cudaSuccess);
    EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
    // A second registration of the same pages is refused, and that is reported, not fatal.
    PinnedHostRange again = PinnedHostRange::Register(mapping.base, kBytes);
    EXPECT_FALSE(again.pinned());
    EXPECT_FALSE(again.status().ok());
    // Moving keeps one registration.
    PinnedHostRange moved = std::move(range);
    EXPECT_TRUE(moved.pinned());
    EXPECT_FALSE(range.pinned());
  }
  // Unregistered on destruction: registering again works.
  PinnedHostRange range = PinnedHostRange::Register(mapping.base, kBytes, {.mapped = true});
  ASSERT_TRUE(range.pinned()) << range.status().ToString();
  EXPECT_NE(range.device_pointer(), nullptr);
}

TEST(PinnedHostRangeTest, CopiesThroughThePinnedRangeRoundTrip) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  Mapping mapping;
  ASSERT_NE(mapping.base, MAP_FAILED);
  PinnedHostRange range = PinnedHostRange::Register(mapping.base, kBytes);
  ASSERT_TRUE(range.pinned()) << range.status().ToString();
  Result<DeviceBuffer> device = DeviceBuffer::Allocate(0, kBytes);
  ASSERT_TRUE(device.ok());
  Result<Stream> stream = Stream::Create(0);
  ASSERT_TRUE(stream.ok());
  auto* bytes = static_cast<unsigned char*>(mapping.base);
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 7);
  std::vector<unsigned char> expected(bytes, bytes + kBytes);
  ASSERT_EQ(cudaMemcpyAsync(device->get(), bytes, kBytes, cudaMemcpyHostToDevice, stream->get()),
            cudaSuccess);
  ASSERT_TRUE(stream->Synchronize().ok());
  std::memset(bytes, 0, kBytes);
  ASSERT_EQ(cudaMemcpyAsync(bytes, device->get(), kBytes, cudaMemcpyDeviceToHost, stream->get()),
            cudaSuccess);
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(std::memcmp(bytes, expected.data(), kBytes), 0);
}

}  // namespace
}  // namespace kvtier::cuda
