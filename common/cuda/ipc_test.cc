#include "common/cuda/ipc.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/cuda/cuda_handles.h"
#include "common/cuda/ipc_test_util.h"
#include "tests/fakes/child_process.h"
#include "tests/gpu/gpu_test_support.h"

namespace kvtier::cuda {
namespace {

constexpr size_t kBytes = size_t{4} << 20;
constexpr uint8_t kSeed = 17;

using kvtier::testing::Child;
using kvtier::testing::ReadLine;
using kvtier::testing::Spawn;
using kvtier::testing::Wait;

std::vector<std::byte> DeviceBytes(const DeviceBuffer& buffer) {
  std::vector<std::byte> host(buffer.size());
  EXPECT_EQ(cudaMemcpy(host.data(), buffer.get(), host.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

class IpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVTIER_REQUIRE_CUDA_DEVICE();
    Result<DeviceBuffer> buffer = DeviceBuffer::Allocate(0, kBytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
    buffer_ = std::move(buffer).value();
    Result<Stream> stream = Stream::Create(0);
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    stream_ = std::move(stream).value();
    pattern_ = testing::Pattern(kBytes, kSeed);
    ASSERT_EQ(cudaMemcpyAsync(buffer_.get(), pattern_.data(), kBytes, cudaMemcpyHostToDevice,
                              stream_.get()),
              cudaSuccess);
    Result<IpcExport> exported = IpcExport::Create(0, buffer_.get(), kBytes);
    ASSERT_TRUE(exported.ok()) << exported.status().ToString();
    export_ = std::move(exported).value();
    // The child orders its reads after this copy through the export's event, not through a
    // host-side synchronisation.
    ASSERT_TRUE(export_.RecordWrites(stream_).ok());
    ASSERT_EQ(export_.serialized().size(), kIpcHandleBytes);
  }

  DeviceBuffer buffer_;
  Stream stream_;
  IpcExport export_;
  std::vector<std::byte> pattern_;
};

TEST_F(IpcTest, AnotherProcessImportsAndCopiesOut) {
  Child child = Spawn(
      {KVTIER_IPC_CHILD_PATH, "copy", testing::ToHex(export_.serialized()), std::to_string(kSeed)});
  const int status = Wait(child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child saw other bytes or failed; see its stderr";
  // The child wrote 0xAB over the second half through its import: the memory is shared.
  ASSERT_TRUE(stream_.Synchronize().ok());
  const std::vector<std::byte> now = DeviceBytes(buffer_);
  EXPECT_TRUE(std::equal(now.begin(), now.begin() + kBytes / 2, pattern_.begin()));
  EXPECT_TRUE(std::all_of(now.begin() + kBytes / 2, now.end(),
                          [](std::byte b) { return b == std::byte{0xAB}; }));
}

TEST_F(IpcTest, ImporterKilledWhileHoldingTheImportLeavesTheMemoryValid) {
  Child child = Spawn({KVTIER_IPC_CHILD_PATH, "hold", testing::ToHex(export_.serialized())});
  ASSERT_EQ(ReadLine(child.out), "ready");
  ASSERT_EQ(::kill(child.pid, SIGKILL), 0);
  const int status = Wait(child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;

  // The bytes are still there (the child's 0x5A over the first page included), the memory can be
  // written and read again, and a new importer can open the same export.
  std::vector<std::byte> expected = pattern_;
  std::fill(expected.begin(), expected.begin() + 4096, std::byte{0x5A});
  EXPECT_EQ(DeviceBytes(buffer_), expected);
  ASSERT_EQ(cudaMemcpy(buffer_.get(), pattern_.data(), kBytes, cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_EQ(DeviceBytes(buffer_), pattern_);
  Child second = Spawn(
      {KVTIER_IPC_CHILD_PATH, "copy", testing::ToHex(export_.serialized()), std::to_string(kSeed)});
  const int second_status = Wait(second);
  EXPECT_TRUE(WIFEXITED(second_status) && WEXITSTATUS(second_status) == 0) << second_status;
}

// The export names its GPU by UUID: a handle from a GPU this process does not see (an engine
// started with another CUDA_VISIBLE_DEVICES) is refused by name, and opening it leaves no error
// behind for the next launch. The handle's UUID lies after magic, version, ordinal and size.
TEST_F(IpcTest, AnExportOfAGpuThisProcessDoesNotSeeIsNotFound) {
  std::string handle = export_.serialized();
  for (size_t i = 24; i < 40; ++i) handle[i] = static_cast<char>(~handle[i]);
  Result<IpcImport> opened = IpcImport::Open(handle, 0);
  EXPECT_EQ(opened.status().code(), StatusCode::kNotFound) << opened.status().ToString();
  EXPECT_NE(opened.status().message().find("is not visible in this process"), std::string::npos)
      << opened.status().message();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(IpcImportTest, BytesThatAreNotAnExportAreRejected) {
  EXPECT_EQ(IpcImport::Open("short").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(IpcImport::Open(std::string(kIpcHandleBytes, 'x')).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::cuda
