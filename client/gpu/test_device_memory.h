// DeviceMemory: the "device" memory of the copier under test, for the client/gpu tests built twice:
// with the fake copier it is host memory; where the test is built for CUDA (KVTIER_TEST_CUDA_POOL
// or KVTIER_TEST_CUDA_COPIER set to 1) it is a cudaMalloc'ed buffer on device 0. Upload and
// Download give the test host-side access for its checks.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#if KVTIER_TEST_CUDA_POOL || KVTIER_TEST_CUDA_COPIER
#define KVTIER_TEST_DEVICE_MEMORY_IS_CUDA 1
#include <cuda_runtime_api.h>

#include "common/cuda/cuda_handles.h"
#endif

namespace kvtier::client::gpu::testing {

class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes) {
#if KVTIER_TEST_DEVICE_MEMORY_IS_CUDA
    Result<cuda::DeviceBuffer> buffer = cuda::DeviceBuffer::Allocate(0, bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
    if (buffer.ok()) buffer_ = std::move(buffer).value();
#else
    buffer_.resize(bytes);
#endif
  }
  std::byte* get() {
#if KVTIER_TEST_DEVICE_MEMORY_IS_CUDA
    return buffer_.get();
#else
    return buffer_.data();
#endif
  }
  void Upload(const std::vector<std::byte>& bytes) {
#if KVTIER_TEST_DEVICE_MEMORY_IS_CUDA
    ASSERT_EQ(cudaMemcpy(get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
#else
    std::memcpy(get(), bytes.data(), bytes.size());
#endif
  }
  std::vector<std::byte> Download(size_t offset, size_t bytes) {
    std::vector<std::byte> out(bytes);
#if KVTIER_TEST_DEVICE_MEMORY_IS_CUDA
    EXPECT_EQ(cudaMemcpy(out.data(), get() + offset, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
#else
    std::memcpy(out.data(), get() + offset, bytes);
#endif
    return out;
  }
  std::vector<std::byte> Download(size_t bytes) { return Download(0, bytes); }

 private:
#if KVTIER_TEST_DEVICE_MEMORY_IS_CUDA
  cuda::DeviceBuffer buffer_;
#else
  std::vector<std::byte> buffer_;
#endif
};

}  // namespace kvtier::client::gpu::testing
