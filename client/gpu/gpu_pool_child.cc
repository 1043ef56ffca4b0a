// The client process of gpu_pool_process_test.cc: a separate process that attaches a daemon's GPU
// pool (CUDA IPC for a GpuTier, the memfd of a fake pool) and reads blocks out of it.
//
//   kvtier_gpu_pool_child <fake|cuda> copy  <url> <ns> <block_bytes> <seed> <key>...
//       GetToDevice of every key into device memory of its own, straight out of the pool; exit 0
//       when all were served and block i holds Bytes(block_bytes, seed + i).
//   kvtier_gpu_pool_child <fake|cuda> paged <url> <ns> <block_bytes> <seed> <key>...
//       the same through GetToPaged (the scatter kernel reads the pool), into blocks 1, 2, ... of
//       a paged cache of 4 planes.
//   kvtier_gpu_pool_child <fake|cuda> hold  <url> <ns> <block_bytes> <seed> <key>...
//       attaches, leases every key with KVT.ACQUIRE, reads the first block out of its import,
//       prints "ready" and waits to be killed, holding the leases and the import.
// <ns> and <key> are 32 hex digits. Exit codes: 0 ok, 2 a failed call, 3 wrong bytes, 64 usage.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/gpu/device_transfer.h"
#include "client/gpu/fake_device_copier.h"
#include "client/gpu/gpu_pool_import.h"
#include "client/gpu/paged_test_util.h"
#if KVTIER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "client/gpu/cuda_device_copier.h"
#include "common/cuda/cuda_handles.h"
#endif

namespace kvtier::client::gpu {
namespace {

constexpr size_t kPlanes = 4;

int Fail(const std::string& what, const Status& status) {
  std::fprintf(stderr, "gpu_pool_child: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 2;
}

// Memory of the copier under test: a device buffer, or host memory for the fake copier.
class Memory {
 public:
  Memory(bool cuda, size_t bytes) : cuda_(cuda), host_(cuda ? 0 : bytes) {
#if KVTIER_WITH_CUDA
    if (cuda_) {
      Result<cuda::DeviceBuffer> buffer = cuda::DeviceBuffer::Allocate(0, bytes);
      if (buffer.ok()) device_ = std::move(buffer).value();
      status_ = buffer.status();
    }
#endif
  }
  const Status& status() const { return status_; }
  std::byte* get() {
#if KVTIER_WITH_CUDA
    if (cuda_) return device_.get();
#endif
    return host_.data();
  }
  std::vector<std::byte> Download(size_t offset, size_t bytes) {
    std::vector<std::byte> out(bytes);
#if KVTIER_WITH_CUDA
    if (cuda_) {
      if (cudaMemcpy(out.data(), device_.get() + offset, bytes, cudaMemcpyDeviceToHost) !=
          cudaSuccess) {
        out.clear();
      }
      return out;
    }
#endif
    std::memcpy(out.data(), host_.data() + offset, bytes);
    return out;
  }

 private:
  [[maybe_unused]] bool cuda_;  // read only in CUDA builds
  std::vector<std::byte> host_;
#if KVTIER_WITH_CUDA
  cuda::DeviceBuffer device_;
#endif
  Status status_;
};

Result<std::unique_ptr<DeviceCopier>> MakeCopier(bool cuda) {
  if (!cuda) return std::unique_ptr<DeviceCopier>(std::make_unique<FakeDeviceCopier>());
#if KVTIER_WITH_CUDA
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<CudaDeviceCopier> copier, CudaDeviceCopier::Create(0));
  return std::unique_ptr<DeviceCopier>(std::move(copier));
#else
  return Rejected("built without CUDA");
#endif
}

struct Args {
  bool cuda = false;
  std::string mode, url;
  NamespaceId ns;
  size_t block_bytes = 0;
  uint32_t seed = 0;
  std::vector<BlockKey> keys;
};

bool Parse(int argc, char** argv, Args* args) {
  if (argc < 8) return false;
  args->cuda = std::strcmp(argv[1], "cuda") == 0;
  args->mode = argv[2];
  args->url = argv[3];
  std::optional<Key128> ns = Key128::FromHex(argv[4]);
  if (!ns) return false;
  args->ns = NamespaceId{*ns};
  args->block_bytes = std::strtoull(argv[5], nullptr, 10);
  args->seed = static_cast<uint32_t>(std::strtoul(argv[6], nullptr, 10));
  for (int i = 7; i < argc; ++i) {
    std::optional<Key128> key = Key128::FromHex(argv[i]);
    if (!key) return false;
    args->keys.push_back(BlockKey{*key});
  }
  return args->block_bytes > 0;
}

// Leases every key, reads the first block out of the import, and waits to be killed.
int Hold(Client& client, const GpuPoolImport& pool, const Args& args) {
  const std::string packed = PackKeys(args.keys);
  const std::string ns = args.ns.ToHex();
  Result<resp::Reply> reply = client.Command({"KVT.ACQUIRE", ns, packed});
  if (!reply.ok()) return Fail("KVT.ACQUIRE", reply.status());
  if (reply->elements.size() != args.keys.size() || reply->elements[0].elements.size() != 5) {
    return Fail("KVT.ACQUIRE", Internal("unexpected reply " + reply->DebugString()));
  }
  const uint64_t offset = static_cast<uint64_t>(reply->elements[0].elements[2].integer);
  Memory local(args.cuda, args.block_bytes);
  Result<std::unique_ptr<DeviceCopier>> copier = MakeCopier(args.cuda);
  if (!copier.ok()) return Fail("copier", copier.status());
  const std::byte* src = pool.Slice(offset, args.block_bytes);
  if (src == nullptr) return Fail("slice", Internal("lease outside the pool"));
  Status copied =
      (*copier)->Copy(local.get(), src, args.block_bytes, CopyDirection::kDeviceToDevice);
  if (copied.ok()) copied = (*copier)->Synchronize();
  if (!copied.ok()) return Fail("copy", copied);
  if (local.Download(0, args.block_bytes) != testing::Bytes(args.block_bytes, args.seed)) {
    std::fprintf(stderr, "gpu_pool_child: the held block differs\n");
    return 3;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) ::pause();
}

int Run(const Args& args) {
  Result<Client> client = Client::Connect(args.url);
  if (!client.ok()) return Fail("connect", client.status());
  if (Result<ArenaInfo> arena = client->Attach(); !arena.ok())
    return Fail("attach", arena.status());
  Result<GpuPoolImport> pool = AttachGpuPool(*client, args.cuda ? 0 : -1);
  if (!pool.ok()) return Fail("attach the GPU pool", pool.status());
  if (pool->fake() == args.cuda)
    return Fail("pool", Internal("the pool's kind is not the copier's"));
  if (args.mode == "hold") return Hold(*client, *pool, args);
  Result<std::unique_ptr<DeviceCopier>> copier = MakeCopier(args.cuda);
  if (!copier.ok()) return Fail("copier", copier.status());
  const size_t n = args.keys.size();
  const testing::PagedShape shape{.planes = kPlanes,
                                  .blocks = n + 1,
                                  .stride_bytes = args.block_bytes / kPlanes,
                                  .layer_block_bytes = args.block_bytes / kPlanes};
  Memory local(args.cuda, args.mode == "paged" ? shape.total_bytes() : n * args.block_bytes);
  if (!local.status().ok()) return Fail("device memory", local.status());
  std::vector<uint64_t> ids;
  std::vector<void*> blocks;
  for (size_t i = 0; i < n; ++i) {
    ids.push_back(i + 1);
    blocks.push_back(local.get() + i * args.block_bytes);
  }
  Result<size_t> got =
      args.mode == "paged"
          ? GetToPaged(*client, **copier, args.ns, args.keys,
                       testing::LayoutOver(local.get(), shape), ids, &*pool)
          : GetToDevice(*client, **copier, args.ns, args.keys, blocks, args.block_bytes, &*pool);
  if (!got.ok()) return Fail(args.mode, got.status());
  if (*got != n) return Fail(args.mode, Internal("served " + std::to_string(*got)));
  std::vector<std::byte> cache;
  if (args.mode == "paged") cache = local.Download(0, shape.total_bytes());
  for (size_t i = 0; i < n; ++i) {
    std::vector<std::byte> block(args.block_bytes);
    if (args.mode == "paged") {
      ReferenceGather(testing::LayoutOver(cache.data(), shape), ids[i], block.data());
    } else {
      block = local.Download(i * args.block_bytes, args.block_bytes);
    }
    if (block != testing::Bytes(args.block_bytes, args.seed + static_cast<uint32_t>(i))) {
      std::fprintf(stderr, "gpu_pool_child: block %zu differs\n", i);
      return 3;
    }
  }
  if (!args.cuda) {
    // The fake copier says where the bytes came from: every block out of the pool.
    const auto& counters = static_cast<FakeDeviceCopier&>(**copier).counters();
    const uint64_t pooled =
        args.mode == "paged" ? counters.device_scatters : counters.device_to_device_copies;
    if (pooled != n) return Fail(args.mode, Internal("not every block came out of the pool"));
  }
  std::printf("served %zu\n", n);
  return 0;
}

}  // namespace
}  // namespace kvtier::client::gpu

int main(int argc, char** argv) {
  kvtier::client::gpu::Args args;
  if (!kvtier::client::gpu::Parse(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: %s <fake|cuda> <copy|paged|hold> <url> <ns> <block_bytes> <seed> "
                 "<key>...\n",
                 argv[0]);
    return 64;
  }
  return kvtier::client::gpu::Run(args);
}
