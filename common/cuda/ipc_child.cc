// The second process of ipc_test.cc: imports a device allocation from its parent and uses it.
//
//   kvtier_ipc_child copy <hex handle> <seed>   checks that the import holds Pattern(seed), copying
//                                               it device-to-device into memory of its own, then
//                                               fills the import's second half with 0xAB; exit 0
//                                               when the bytes matched.
//   kvtier_ipc_child hold <hex handle>          imports, prints "ready" and waits to be killed.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda/cuda_handles.h"
#include "common/cuda/ipc.h"
#include "common/cuda/ipc_test_util.h"

namespace {

using namespace kvtier;

int Fail(const std::string& what, const Status& status) {
  std::fprintf(stderr, "ipc_child: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 2;
}

int Copy(const cuda::IpcImport& import, uint8_t seed) {
  Result<cuda::Stream> stream = cuda::Stream::Create(import.device());
  if (!stream.ok()) return Fail("stream", stream.status());
  Result<cuda::DeviceBuffer> local = cuda::DeviceBuffer::Allocate(import.device(), import.size());
  if (!local.ok()) return Fail("allocate", local.status());
  if (Status s = import.WaitForExporter(*stream); !s.ok()) return Fail("wait", s);
  std::vector<std::byte> host(import.size());
  const bool copied = cudaMemcpyAsync(local->get(), import.base(), import.size(),
                                      cudaMemcpyDeviceToDevice, stream->get()) == cudaSuccess &&
                      cudaMemcpyAsync(host.data(), local->get(), host.size(),
                                      cudaMemcpyDeviceToHost, stream->get()) == cudaSuccess &&
                      cudaMemsetAsync(import.base() + import.size() / 2, 0xAB, import.size() / 2,
                                      stream->get()) == cudaSuccess;
  if (!copied) return Fail("copy", DeviceError("cudaMemcpyAsync/cudaMemsetAsync failed"));
  if (Status s = stream->Synchronize(); !s.ok()) return Fail("synchronize", s);
  if (host != cuda::testing::Pattern(host.size(), seed)) {
    std::fprintf(stderr, "ipc_child: imported bytes differ from the pattern\n");
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s copy|hold <hex handle> [seed]\n", argv[0]);
    return 64;
  }
  const std::string mode = argv[1];
  kvtier::Result<kvtier::cuda::IpcImport> import =
      kvtier::cuda::IpcImport::Open(kvtier::cuda::testing::FromHex(argv[2]));
  if (!import.ok()) return Fail("import", import.status());
  if (mode == "copy" && argc == 4) return Copy(*import, static_cast<uint8_t>(std::atoi(argv[3])));
  if (mode == "hold") {
    // Touch the import so the mapping is really in use, then wait for SIGKILL.
    if (cudaMemsetAsync(import->base(), 0x5A, 4096, nullptr) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      return Fail("touch", kvtier::DeviceError("cudaMemset on the import failed"));
    }
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) ::pause();
  }
  std::fprintf(stderr, "ipc_child: unknown mode %s\n", mode.c_str());
  return 64;
}
