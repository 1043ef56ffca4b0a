// kvtier_gpu_bench: the GPU figures of issue 5, each against its baseline in the same run
// (tests/gpu/run.sh starts kvtierd and runs this; built only with KVTIER_WITH_CUDA).
//
//   h2d_ratio_to_cudamemcpy   GetToDevice of 2 MiB blocks from kvtierd's host arena into device
//                             memory (ACQUIRE, copies, RELEASE) vs cudaMemcpyAsync of the same
//                             bytes from pinned host memory into the device.
//   d2h_ratio_to_cudamemcpy   PutFromDevice (RESERVE, copies, COMMIT) vs cudaMemcpyAsync from the
//                             device into pinned host memory.
//   ipc_d2d_ratio_to_device_copy
//                             blocks copied out of a server's GPU pool (a GpuTier shared with
//                             KVT.GPUATTACH) by another process that imported it over CUDA IPC
//                             (AttachGpuPool), into that process's device buffer, vs
//                             cudaMemcpyAsync device-to-device of the same blocks in the pool's
//                             own process. The server runs inside this program, on a scratch
//                             Unix socket, over a store of [GpuTier, HostTier].
//   ipc_get_to_device_ratio_to_device_copy
//                             the same blocks fetched by that process with GetToDevice and the
//                             pool (ACQUIRE, device-to-device copies, RELEASE) vs the same
//                             baseline: what the protocol costs on top of the copies.
//   paged_gather_ratio_to_contiguous
//                             the paged gather kernel on 256 16-token Llama-8B blocks (32 layers
//                             x K,V of 32 KiB each) into contiguous device buffers, as one batch
//                             (a launch per 64 blocks), vs one contiguous device-to-device
//                             cudaMemcpyAsync of the same bytes per block.
// Each figure is the median of several repetitions; ratios above 1 mean kvtier is faster.
//
// usage: kvtier_gpu_bench [--section all|client|ipc|paged] [--url unix:///path/kvtierd.sock]
//                         [--blocks N] [--reps R]
// (--url, a running kvtierd, is needed by the client section only.)
// (kvtier_gpu_bench --ipc-child <url> <blocks> <reps> is the second process of the IPC figures.)
#include <cuda_runtime_api.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "client/client.h"
#include "client/gpu/cuda_device_copier.h"
#include "client/gpu/device_transfer.h"
#include "client/gpu/gpu_pool_import.h"
#include "client/gpu/paged_test_util.h"
#include "common/clock.h"
#include "common/cuda/cuda_handles.h"
#include "daemon/server/server.h"
#include "daemon/store/store.h"
#include "tiers/gpu/gpu_tier.h"
#include "tiers/host/host_tier.h"

extern char** environ;

namespace kvtier::bench {
namespace {

constexpr size_t kBlockBytes = size_t{2} << 20;

[[noreturn]] void Die(const std::string& what, const Status& status) {
  std::fprintf(stderr, "kvtier_gpu_bench: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Check(Result<T> result, const std::string& what) {
  if (!result.ok()) Die(what, result.status());
  return std::move(result).value();
}

void Check(const Status& status, const std::string& what) {
  if (!status.ok()) Die(what, status);
}

void CheckCuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) Die(what, DeviceError(cudaGetErrorString(error)));
}

// Seconds of `count` async copies of `bytes` each on `stream`, timed with events.
double TimeCopies(void* dst, const void* src, size_t count, size_t bytes, cudaMemcpyKind kind,
                  const cuda::Stream& stream) {
  cuda::Event start = Check(cuda::Event::Create(0, {.timing = true}), "event");
  cuda::Event end = Check(cuda::Event::Create(0, {.timing = true}), "event");
  Check(start.Record(stream), "record");
  for (size_t i = 0; i < count; ++i) {
    CheckCuda(
        cudaMemcpyAsync(static_cast<std::byte*>(dst) + i * bytes,
                        static_cast<const std::byte*>(src) + i * bytes, bytes, kind, stream.get()),
        "cudaMemcpyAsync");
  }
  Check(end.Record(stream), "record");
  Check(end.Synchronize(), "synchronize");
  return Check(cuda::Event::ElapsedMs(start, end), "elapsed") / 1e3;
}

struct PinnedHost {
  explicit PinnedHost(size_t bytes) {
    CheckCuda(cudaMallocHost(&data, bytes), "cudaMallocHost");
    std::memset(data, 0x5C, bytes);
  }
  ~PinnedHost() { cudaFreeHost(data); }
  void* data = nullptr;
};

// ---- Through the client: h2d and d2h ----

struct ClientFigures {
  double h2d_gbps = 0, d2h_gbps = 0, h2d_base_gbps = 0, d2h_base_gbps = 0;
};

ClientFigures MeasureClient(const std::string& url, size_t blocks, int reps) {
  using namespace client;
  Client c = Check(Client::Connect(url), "connect to " + url);
  Check(c.Attach(), "attach");
  cuda::PinnedHostRange pinned = gpu::PinArena(c);
  if (!pinned.pinned()) Die("pin the arena mapping", pinned.status());
  hashing::NamespaceDescriptor d;
  d.model_id = "kvtier-gpu-bench";
  d.kv_dtype = "bf16";
  d.num_layers = 32;
  d.num_kv_heads = 8;
  d.head_dim = 128;
  d.tokens_per_block = 16;
  d.layout_tag = "bench";
  NamespaceInfo ns = Check(c.RegisterNamespace(d, kBlockBytes), "register");
  auto keys_for = [&](uint32_t seed) {
    std::vector<uint32_t> tokens(blocks * ns.tokens_per_block);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = seed * 7919u + static_cast<uint32_t>(i);
    return Check(Client::HashTokens(ns, tokens), "hash");
  };
  const size_t total = blocks * kBlockBytes;
  cuda::DeviceBuffer device = Check(cuda::DeviceBuffer::Allocate(0, total), "device buffer");
  CheckCuda(cudaMemset(device.get(), 0x3A, total), "cudaMemset");
  std::vector<const void*> src;
  std::vector<void*> dst;
  for (size_t i = 0; i < blocks; ++i) {
    src.push_back(device.get() + i * kBlockBytes);
    dst.push_back(device.get() + i * kBlockBytes);
  }
  auto copier = Check(gpu::CudaDeviceCopier::Create(0), "copier");

  std::vector<double> put_s, get_s;
  const std::vector<BlockKey> resident = keys_for(1);
  for (int r = -1; r < reps; ++r) {  // r = -1 warms up (page faults, CUDA lazy init)
    const std::vector<BlockKey> keys = keys_for(100 + r + 1);
    const double t0 = NowSeconds();
    std::vector<Status> put =
        Check(gpu::PutFromDevice(c, *copier, ns.id, keys, src, kBlockBytes), "PutFromDevice");
    const double t1 = NowSeconds();
    for (const Status& s : put) Check(s, "PutFromDevice block");
    if (r >= 0) put_s.push_back(t1 - t0);
    Check(c.Del(ns.id, keys), "del");
  }
  for (const Status& s :
       Check(gpu::PutFromDevice(c, *copier, ns.id, resident, src, kBlockBytes), "PutFromDevice")) {
    Check(s, "PutFromDevice block");
  }
  for (int r = -1; r < reps; ++r) {
    const double t0 = NowSeconds();
    const size_t served =
        Check(gpu::GetToDevice(c, *copier, ns.id, resident, dst, kBlockBytes), "GetToDevice");
    const double t1 = NowSeconds();
    if (served != blocks) Die("GetToDevice", Internal("served " + std::to_string(served)));
    if (r >= 0) get_s.push_back(t1 - t0);
  }

  PinnedHost host(total);
  cuda::Stream stream = Check(cuda::Stream::Create(0), "stream");
  std::vector<double> h2d_s, d2h_s;
  for (int r = -1; r < reps; ++r) {
    const double h2d =
        TimeCopies(device.get(), host.data, blocks, kBlockBytes, cudaMemcpyHostToDevice, stream);
    const double d2h =
        TimeCopies(host.data, device.get(), blocks, kBlockBytes, cudaMemcpyDeviceToHost, stream);
    if (r >= 0) {
      h2d_s.push_back(h2d);
      d2h_s.push_back(d2h);
    }
  }
  const double gb = static_cast<double>(total) / 1e9;
  return {gb / Median(get_s), gb / Median(put_s), gb / Median(h2d_s), gb / Median(d2h_s)};
}

// ---- IPC: another process copies blocks out of a server's GPU pool ----

NamespaceId IpcNamespace() {
  NamespaceId ns;
  ns.high = 0x6b76746965722d67;  // "kvtier-g"
  ns.low = 0x70752d62656e6368;   // "pu-bench"
  return ns;
}

BlockKey IpcKey(size_t i) {
  BlockKey key;
  key.high = 0x6970632d626c6f63;  // "ipc-bloc"
  key.low = i + 1;
  return key;
}

// The child: attaches the server's pool and times raw copies out of the import, then GetToDevice
// with it. Prints "<ipc GB/s> <get GB/s>".
void ChildIpc(const std::string& url, size_t blocks, int reps) {
  client::Client c = Check(client::Client::Connect(url), "connect to " + url);
  Check(c.Attach(), "attach");
  client::gpu::GpuPoolImport pool = Check(client::gpu::AttachGpuPool(c, 0), "attach the GPU pool");
  if (pool.fake()) Die("attach the GPU pool", Internal("the server's pool is not a GpuTier"));
  cuda::Stream stream = Check(cuda::Stream::Create(0), "stream");
  cuda::DeviceBuffer local = Check(cuda::DeviceBuffer::Allocate(0, blocks * kBlockBytes), "buffer");
  std::vector<double> raw_s, get_s;
  for (int r = -1; r < reps; ++r) {
    const double s =
        TimeCopies(local.get(), pool.base(), blocks, kBlockBytes, cudaMemcpyDeviceToDevice, stream);
    if (r >= 0) raw_s.push_back(s);
  }
  auto copier = Check(client::gpu::CudaDeviceCopier::Create(0), "copier");
  std::vector<BlockKey> keys;
  std::vector<void*> dst;
  for (size_t i = 0; i < blocks; ++i) {
    keys.push_back(IpcKey(i));
    dst.push_back(local.get() + i * kBlockBytes);
  }
  for (int r = -1; r < reps; ++r) {
    CheckCuda(cudaMemset(local.get(), 0, blocks * kBlockBytes), "cudaMemset");
    const double t0 = NowSeconds();
    const size_t served =
        Check(client::gpu::GetToDevice(c, *copier, IpcNamespace(), keys, dst, kBlockBytes, &pool),
              "GetToDevice");
    const double t1 = NowSeconds();
    if (served != blocks) Die("GetToDevice", Internal("served " + std::to_string(served)));
    if (r >= 0) get_s.push_back(t1 - t0);
  }
  // The copied bytes are the pool's: every block starts with the parent's 0x42 fill.
  unsigned char first = 0;
  CheckCuda(cudaMemcpy(&first, local.get() + (blocks - 1) * kBlockBytes, 1, cudaMemcpyDeviceToHost),
            "cudaMemcpy");
  if (first != 0x42) Die("IPC import", Internal("imported bytes differ from the pool's"));
  const double gb = static_cast<double>(blocks * kBlockBytes) / 1e9;
  std::printf("%.6f %.6f\n", gb / Median(raw_s), gb / Median(get_s));
}

struct IpcFigures {
  double ipc_gbps = 0, get_gbps = 0, local_gbps = 0;
};

// Runs `self --ipc-child url blocks reps` and returns what it printed.
std::string RunIpcChild(const char* self, const std::string& url, size_t blocks, int reps) {
  std::vector<std::string> args = {self, "--ipc-child", url, std::to_string(blocks),
                                   std::to_string(reps)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (::pipe(fds) != 0) Die("pipe", ErrnoStatus(errno, "pipe"));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  pid_t pid = -1;
  // posix_spawn, not fork: this process has initialised CUDA.
  if (::posix_spawn(&pid, self, &actions, nullptr, argv.data(), environ) != 0) {
    Die("spawn the IPC child", ErrnoStatus(errno, "posix_spawn"));
  }
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Die("IPC child", Internal("exited with status " + std::to_string(status)));
  }
  return out;
}

IpcFigures MeasureIpc(const char* self, size_t blocks, int reps) {
  tiers::GpuTierOptions options;
  options.capacity_bytes = blocks * kBlockBytes;
  auto gpu = Check(tiers::GpuTier::Create(options), "GpuTier");
  auto host = Check(tiers::HostTier::Create({.capacity_bytes = uint64_t{64} << 20,
                                             .try_huge_pages = false,
                                             .try_mlock = false,
                                             .name = ""}),
                    "HostTier");
  auto store =
      Check(store::Store::Create({}, {gpu.get(), host.get()}, SteadyClock::Instance()), "store");
  Check(store->RegisterNamespace(
            {.id = IpcNamespace(), .block_bytes = kBlockBytes, .label = "gpu-bench ipc"}),
        "register");
  PinnedHost fill(kBlockBytes);
  std::memset(fill.data, 0x42, kBlockBytes);
  for (size_t i = 0; i < blocks; ++i) {
    Extent extent = Check(gpu->Allocate(kBlockBytes), "allocate");
    if (extent.offset != i * kBlockBytes) Die("allocate", Internal("pool blocks not contiguous"));
    Check(gpu->Write(extent, {static_cast<std::byte*>(fill.data), kBlockBytes}), "write");
    Check(store->AdoptBlock(TierId::kGpu, IpcNamespace(), IpcKey(i), extent, std::nullopt),
          "adopt");
  }
  cuda::DeviceBuffer local = Check(cuda::DeviceBuffer::Allocate(0, blocks * kBlockBytes), "buffer");
  cuda::Stream stream = Check(cuda::Stream::Create(0), "stream");
  std::vector<double> seconds;
  for (int r = -1; r < reps; ++r) {
    const double s = TimeCopies(local.get(), gpu->pool_base(), blocks, kBlockBytes,
                                cudaMemcpyDeviceToDevice, stream);
    if (r >= 0) seconds.push_back(s);
  }
  IpcFigures figures;
  figures.local_gbps = static_cast<double>(blocks * kBlockBytes) / 1e9 / Median(seconds);

  std::string dir = "/tmp/kvtier-gpu-bench-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) Die("mkdtemp", ErrnoStatus(errno, "mkdtemp"));
  server::ServerOptions server_options;
  server_options.unix_path = dir + "/kvtierd.sock";
  auto server = Check(server::Server::Create(server_options, *store), "server");
  Check(server->Start(), "start the server");
  const std::string out = RunIpcChild(self, "unix://" + server_options.unix_path, blocks, reps);
  server->Stop();
  ::rmdir(dir.c_str());
  if (std::sscanf(out.c_str(), "%lf %lf", &figures.ipc_gbps, &figures.get_gbps) != 2) {
    Die("IPC child", Internal("unexpected output: " + out));
  }
  return figures;
}

// ---- Paged gather kernel vs contiguous copy ----

double MeasurePaged(size_t blocks, int reps) {
  // 32 layers x (K, V) planes of 16 tokens x 8 kv heads x 128 dims x 2 bytes = 32 KiB per plane
  // per block: one 2 MiB Llama-3.1-8B block. `blocks` blocks per plane.
  const client::gpu::testing::PagedShape shape{
      .planes = 64, .blocks = blocks, .stride_bytes = 32 << 10, .layer_block_bytes = 32 << 10};
  cuda::DeviceBuffer cache = Check(cuda::DeviceBuffer::Allocate(0, shape.total_bytes()), "cache");
  CheckCuda(cudaMemset(cache.get(), 0x11, shape.total_bytes()), "cudaMemset");
  cuda::DeviceBuffer flat = Check(cuda::DeviceBuffer::Allocate(0, blocks * kBlockBytes), "flat");
  const client::gpu::PagedKvLayout layout = client::gpu::testing::LayoutOver(cache.get(), shape);
  if (layout.block_bytes() != kBlockBytes) Die("layout", Internal("not a 2 MiB block"));
  auto copier = Check(client::gpu::CudaDeviceCopier::Create(0), "copier");
  // The baseline runs on a stream of its own; the copier's stream is private to it.
  cuda::Stream stream = Check(cuda::Stream::Create(0), "stream");
  std::vector<client::gpu::PagedBlockCopy> entries;
  for (size_t i = 0; i < blocks; ++i) {
    entries.push_back({.block_id = (i * 37) % blocks,  // scattered block ids, as in a real cache
                       .contiguous = flat.get() + i * kBlockBytes,
                       .kind = client::gpu::MemoryKind::kDevice});
  }
  std::vector<double> gather_s, contiguous_s;
  for (int r = -1; r < reps; ++r) {
    cuda::Event start = Check(cuda::Event::Create(0, {.timing = true}), "event");
    cuda::Event end = Check(cuda::Event::Create(0, {.timing = true}), "event");
    CheckCuda(cudaEventRecord(start.get(), copier->stream()), "record");
    // One batch, as GetToPaged hands the copier every block of a call.
    Check(copier->GatherBlocks(layout, entries), "gather");
    CheckCuda(cudaEventRecord(end.get(), copier->stream()), "record");
    Check(end.Synchronize(), "synchronize");
    const double gather = Check(cuda::Event::ElapsedMs(start, end), "elapsed") / 1e3;
    const double contiguous =
        TimeCopies(flat.get(), cache.get(), blocks, kBlockBytes, cudaMemcpyDeviceToDevice, stream);
    if (r >= 0) {
      gather_s.push_back(gather);
      contiguous_s.push_back(contiguous);
    }
  }
  PrintFigure("paged_gather_gbps", blocks * kBlockBytes / 1e9 / Median(gather_s), "GB/s");
  PrintFigure("paged_contiguous_copy_gbps", blocks * kBlockBytes / 1e9 / Median(contiguous_s),
              "GB/s");
  return Median(contiguous_s) / Median(gather_s);
}

int Main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--ipc-child") {
    ChildIpc(argv[2], std::stoul(argv[3]), std::atoi(argv[4]));
    return 0;
  }
  std::string url;
  std::string section = "all";
  size_t blocks = 128;
  int reps = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--url") {
      url = argv[i + 1];
    } else if (flag == "--section") {
      section = argv[i + 1];
    } else if (flag == "--blocks") {
      blocks = std::stoul(argv[i + 1]);
    } else if (flag == "--reps") {
      reps = std::atoi(argv[i + 1]);
    }
  }
  const bool all = section == "all";
  if ((url.empty() && (all || section == "client")) || blocks == 0 || reps <= 0 ||
      !(all || section == "client" || section == "ipc" || section == "paged")) {
    std::fprintf(stderr,
                 "usage: %s [--section all|client|ipc|paged] [--url unix:///path.sock] "
                 "[--blocks N] [--reps R]\n(--url is needed for the client section)\n",
                 argv[0]);
    return 64;
  }
  cudaDeviceProp prop{};
  CheckCuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::fprintf(stderr, "kvtier_gpu_bench: device 0 is %s; %zu blocks of 2 MiB, %d repetitions\n",
               prop.name, blocks, reps);

  if (all || section == "client") {
    const ClientFigures c = MeasureClient(url, blocks, reps);
    PrintFigure("h2d_ratio_to_cudamemcpy", c.h2d_gbps / c.h2d_base_gbps, "ratio");
    PrintFigure("h2d_client_gbps", c.h2d_gbps, "GB/s");
    PrintFigure("h2d_cudamemcpy_gbps", c.h2d_base_gbps, "GB/s");
    PrintFigure("d2h_ratio_to_cudamemcpy", c.d2h_gbps / c.d2h_base_gbps, "ratio");
    PrintFigure("d2h_client_gbps", c.d2h_gbps, "GB/s");
    PrintFigure("d2h_cudamemcpy_gbps", c.d2h_base_gbps, "GB/s");
  }
  if (all || section == "ipc") {
    const IpcFigures ipc = MeasureIpc(argv[0], blocks, reps);
    PrintFigure("ipc_d2d_ratio_to_device_copy", ipc.ipc_gbps / ipc.local_gbps, "ratio");
    PrintFigure("ipc_get_to_device_ratio_to_device_copy", ipc.get_gbps / ipc.local_gbps, "ratio");
    PrintFigure("ipc_d2d_gbps", ipc.ipc_gbps, "GB/s");
    PrintFigure("ipc_get_to_device_gbps", ipc.get_gbps, "GB/s");
    PrintFigure("device_copy_gbps", ipc.local_gbps, "GB/s");
  }
  if (all || section == "paged") {
    PrintFigure("paged_gather_ratio_to_contiguous", MeasurePaged(256, reps), "ratio");
  }
  return 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) { return kvtier::bench::Main(argc, argv); }
