// kvtier_cuda_env_check: can this environment do what kvtier's GPU path needs at all? Tried with
// the bare CUDA runtime on plain buffers, with no kvtier code, so that a refusal here is told apart
// from a failure of the project's code: containers and sandboxes often hide the device, cap locked
// memory (cudaHostRegister fails) or isolate processes (CUDA IPC fails).
//
// Steps, each printed on its own line as "env: <step>: OK ..." or "env: <step>: REFUSED ...":
//   device    cudaGetDeviceCount, name, compute capability, driver and runtime versions
//   pin       cudaHostRegister of a malloc'ed buffer and of a shared memfd mapping (as the host
//             arena is), then a copy from each
//   ipc       cudaIpcGetMemHandle + an interprocess event, opened by a second process (this
//             program again, started with posix_spawn: fork after CUDA initialisation is not
//             allowed) that copies the buffer out and checks its bytes
//
// Exit status (tests/gpu/run.sh relies on it): 0 everything works; 10 no CUDA device or driver;
// 11 host memory cannot be pinned; 12 CUDA IPC between processes is refused; 13 both 11 and 12;
// 14 a plain CUDA call that should not fail did; 15 a driver is there, but older than the CUDA
// runtime linked into these binaries needs (they must be built with an older toolkit).
//
// usage: kvtier_cuda_env_check                     (the checks)
//        kvtier_cuda_env_check --import HEX BYTES  (the second process of the ipc step)
#include <cuda_runtime_api.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr int kOk = 0;
constexpr int kNoDevice = 10;
constexpr int kPinRefused = 11;
constexpr int kIpcRefused = 12;
constexpr int kPinAndIpcRefused = 13;
constexpr int kCudaFailed = 14;
constexpr int kDriverTooOld = 15;

constexpr size_t kBytes = size_t{16} << 20;

unsigned char PatternByte(size_t i) { return static_cast<unsigned char>(i * 131 + (i >> 12) + 7); }

std::string Describe(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

// Hex of the two IPC handles, as the child's command line carries them.
std::string ToHex(const void* data, size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    const unsigned char c = static_cast<const unsigned char*>(data)[i];
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

bool FromHex(const std::string& hex, void* data, size_t bytes) {
  if (hex.size() != 2 * bytes) return false;
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < bytes; ++i) {
    static_cast<unsigned char*>(data)[i] =
        static_cast<unsigned char>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return true;
}

// Whether `host` holds the pattern after a device-to-host copy from `device`.
bool CopyOutMatches(const void* device, unsigned char* host, size_t bytes, std::string& why) {
  const cudaError_t error = cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost);
  if (error != cudaSuccess) {
    why = "cudaMemcpy: " + Describe(error);
    return false;
  }
  for (size_t i = 0; i < bytes; ++i) {
    if (host[i] != PatternByte(i)) {
      why = "byte " + std::to_string(i) + " differs after the copy";
      return false;
    }
  }
  return true;
}

// Registers `host` with CUDA and copies the device buffer into it; prints the outcome.
bool TryPin(const char* what, unsigned char* host, const void* device) {
  cudaError_t error = cudaHostRegister(host, kBytes, cudaHostRegisterPortable);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // a refused registration must not fail the next call
    std::printf("env: pin: REFUSED: cudaHostRegister of %zu MiB of %s: %s\n", kBytes >> 20, what,
                Describe(error).c_str());
    return false;
  }
  std::string why;
  const bool ok = CopyOutMatches(device, host, kBytes, why);
  (void)cudaHostUnregister(host);
  if (ok) {
    std::printf("env: pin: OK: cudaHostRegister of %zu MiB of %s, copy into it\n", kBytes >> 20,
                what);
  } else {
    std::printf("env: pin: REFUSED: copy into pinned %s: %s\n", what, why.c_str());
  }
  return ok;
}

bool CheckPinning(const void* device) {
  bool ok = true;
  void* plain = nullptr;
  if (posix_memalign(&plain, 4096, kBytes) != 0) return false;
  ok = TryPin("malloc'ed memory", static_cast<unsigned char*>(plain), device) && ok;
  std::free(plain);
  // The daemon's host arena is a MAP_SHARED memfd mapping, which some sandboxes treat apart.
  const int fd = memfd_create("kvtier-env-check", 0);
  if (fd < 0 || ftruncate(fd, kBytes) != 0) {
    std::printf("env: pin: REFUSED: memfd_create/ftruncate failed\n");
    if (fd >= 0) close(fd);
    return false;
  }
  void* shared = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (shared == MAP_FAILED) {
    std::printf("env: pin: REFUSED: mmap of a memfd failed\n");
    return false;
  }
  ok = TryPin("a shared memfd mapping", static_cast<unsigned char*>(shared), device) && ok;
  munmap(shared, kBytes);
  return ok;
}

// The second process: opens the handles, waits on the event, copies out, checks. Exit 0 when the
// bytes match; prints why not otherwise.
int Import(const std::string& hex) {
  cudaIpcMemHandle_t memory;
  cudaIpcEventHandle_t event_handle;
  if (hex.size() != 2 * (sizeof(memory) + sizeof(event_handle)) ||
      !FromHex(hex.substr(0, 2 * sizeof(memory)), &memory, sizeof(memory)) ||
      !FromHex(hex.substr(2 * sizeof(memory)), &event_handle, sizeof(event_handle))) {
    std::printf("bad handle on the command line\n");
    return kCudaFailed;
  }
  void* base = nullptr;
  cudaError_t error = cudaIpcOpenMemHandle(&base, memory, cudaIpcMemLazyEnablePeerAccess);
  if (error != cudaSuccess) {
    std::printf("cudaIpcOpenMemHandle: %s\n", Describe(error).c_str());
    return kIpcRefused;
  }
  cudaEvent_t event = nullptr;
  error = cudaIpcOpenEventHandle(&event, event_handle);
  if (error == cudaSuccess) error = cudaStreamWaitEvent(nullptr, event, 0);
  if (error != cudaSuccess) {
    std::printf("cudaIpcOpenEventHandle/cudaStreamWaitEvent: %s\n", Describe(error).c_str());
    (void)cudaIpcCloseMemHandle(base);
    return kIpcRefused;
  }
  std::vector<unsigned char> host(kBytes);
  std::string why;
  const bool ok = CopyOutMatches(base, host.data(), kBytes, why);
  (void)cudaEventDestroy(event);
  (void)cudaIpcCloseMemHandle(base);
  if (!ok) std::printf("%s\n", why.c_str());
  return ok ? kOk : kIpcRefused;
}

std::string SelfPath() {
  std::vector<char> path(4096);
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  return n > 0 ? std::string(path.data(), static_cast<size_t>(n)) : std::string();
}

bool CheckIpc(void* device) {
  cudaIpcMemHandle_t memory;
  cudaError_t error = cudaIpcGetMemHandle(&memory, device);
  cudaEvent_t event = nullptr;
  cudaIpcEventHandle_t event_handle;
  if (error == cudaSuccess) {
    error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess);
  }
  if (error == cudaSuccess) error = cudaIpcGetEventHandle(&event_handle, event);
  if (error == cudaSuccess) error = cudaEventRecord(event, nullptr);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    std::printf("env: ipc: REFUSED: export: %s\n", Describe(error).c_str());
    if (event != nullptr) (void)cudaEventDestroy(event);
    return false;
  }
  std::string self = SelfPath();
  std::string flag = "--import";
  std::string hex = ToHex(&memory, sizeof(memory)) + ToHex(&event_handle, sizeof(event_handle));
  std::string bytes = std::to_string(kBytes);
  std::vector<char*> argv = {self.data(), flag.data(), hex.data(), bytes.data(), nullptr};
  pid_t pid = -1;
  bool ok = false;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    std::printf("env: ipc: REFUSED: could not start the importing process (%s)\n", self.c_str());
  } else {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = WIFEXITED(status) && WEXITSTATUS(status) == kOk;
    if (ok) {
      std::printf("env: ipc: OK: another process opened a %zu MiB export and read it back\n",
                  kBytes >> 20);
    } else {
      std::printf("env: ipc: REFUSED: the importing process failed (its reason is above)\n");
    }
  }
  (void)cudaEventDestroy(event);
  return ok;
}

int Check() {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);  // 0: no driver at all
  (void)cudaRuntimeGetVersion(&runtime);
  // The runtime answers "insufficient driver" both with no driver and with one too old for it;
  // only the second is a build to redo (with a toolkit no newer than the driver), not a machine
  // without a GPU.
  if (error == cudaErrorInsufficientDriver && driver > 0) {
    std::printf(
        "env: device: REFUSED: the driver supports CUDA %d.%d, older than the CUDA %d.%d runtime "
        "these binaries carry: build them with a toolkit no newer than the driver (%s)\n",
        driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10,
        Describe(error).c_str());
    return kDriverTooOld;
  }
  if (error != cudaSuccess || count == 0) {
    std::printf("env: device: no CUDA device (%s)\n",
                error != cudaSuccess ? Describe(error).c_str() : "the driver lists none");
    return kNoDevice;
  }
  cudaDeviceProp prop{};
  error = cudaGetDeviceProperties(&prop, 0);
  if (error == cudaSuccess) error = cudaSetDevice(0);
  if (error != cudaSuccess) {
    std::printf("env: device: REFUSED: device 0 cannot be used: %s\n", Describe(error).c_str());
    return kNoDevice;
  }
  std::printf(
      "env: device: OK: %d device(s); device 0 %s, sm_%d%d, %zu MiB; driver %d, runtime %d\n",
      count, prop.name, prop.major, prop.minor, prop.totalGlobalMem >> 20, driver, runtime);
  void* device = nullptr;
  std::vector<unsigned char> pattern(kBytes);
  for (size_t i = 0; i < kBytes; ++i) pattern[i] = PatternByte(i);
  error = cudaMalloc(&device, kBytes);
  if (error == cudaSuccess) {
    error = cudaMemcpy(device, pattern.data(), kBytes, cudaMemcpyHostToDevice);
  }
  if (error != cudaSuccess) {
    std::printf("env: device: FAILED: cudaMalloc/cudaMemcpy of %zu MiB: %s\n", kBytes >> 20,
                Describe(error).c_str());
    return kCudaFailed;
  }
  const bool pinned = CheckPinning(device);
  const bool ipc = CheckIpc(device);
  (void)cudaFree(device);
  if (!pinned && !ipc) return kPinAndIpcRefused;
  if (!pinned) return kPinRefused;
  if (!ipc) return kIpcRefused;
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 4 && std::string(argv[1]) == "--import") return Import(argv[2]);
  return Check();
}
