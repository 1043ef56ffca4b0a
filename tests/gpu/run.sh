#!/usr/bin/env bash
# The GPU checks of kvtier, for a machine with an NVIDIA GPU and the CUDA toolkit (issue 5; a
# machine with the driver only runs the folder tests/gpu/prepare.sh makes: tests/gpu/README.md).
# Builds a release tree with
# CUDA (build-gpu-release/), runs the ctest label `gpu` (device pool tier, pinned host ranges,
# CUDA IPC between two processes, an importer killed while holding its import, the paged
# gather/scatter kernel against the CPU reference, the client's GPU put/get against kvtierd, a
# server's GpuTier pool read over CUDA IPC by another process, killed while holding leases,
# kvtierd stopped while a client holds the pool's import), then
# starts kvtierd and prints the GPU benchmark figures (bench/gpu_bench.cc). Everything goes to the
# terminal and to the log file (default build-gpu-release/gpu-run.log; KVTIER_GPU_LOG overrides).
# Stops at once, with the reason, when there is no usable GPU or the build fails; after that it
# runs every test and benchmark section and exits non-zero if any of them failed.
# Meant to finish in well under 5 minutes on one H200 (most of it is the build).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
build="$root/build-gpu-release"
mkdir -p "$build"
log="${KVTIER_GPU_LOG:-$build/gpu-run.log}"
: >"$log"
exec > >(tee -a "$log") 2>&1
started=$(date +%s)
step() { echo; echo "== $* ($(($(date +%s) - started)) s) =="; }
fail() { echo "tests/gpu/run.sh: FAILED: $*" >&2; exit 1; }

step "GPU"
command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: no NVIDIA driver on this machine"
nvidia-smi || fail "nvidia-smi failed: the driver cannot reach a GPU"
gpu_count=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c . || true)
[ "$gpu_count" -ge 1 ] || fail "nvidia-smi lists no GPU"
compute_cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')

step "dependencies"
# Asks apt only for what is missing; a machine without network but with the packages passes.
if ! scripts/install-deps.sh; then
  echo "tests/gpu/run.sh: warning: scripts/install-deps.sh failed; building with what is installed"
fi
nvcc_path=$(command -v nvcc || true)
if [ -z "$nvcc_path" ]; then
  for candidate in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
    [ -x "$candidate" ] && nvcc_path="$candidate" && break
  done
fi
[ -n "$nvcc_path" ] || fail "nvcc not found (install the CUDA toolkit or put nvcc on PATH)"
export CUDACXX="$nvcc_path"
"$nvcc_path" --version | tail -2

step "configure (release, CUDA, sm_${compute_cap:-native})"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DKVTIER_WITH_CUDA=ON -DKVTIER_BUILD_TESTS=ON -DKVTIER_BUILD_BENCH=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${compute_cap:-native}" >/dev/null

step "build"
targets=(kvtierd kvtier_gpu_bench kvtier_cuda_env_check kvtier_ipc_child cuda_gpu_test cuda_probe_test gpu_tier_test
  fake_gpu_tier_test gpu_tier_factory_test client_gpu_test client_gpu_cuda_test
  device_transfer_test device_transfer_cuda_test kvtier_gpu_pool_child gpu_pool_cuda_test
  gpu_pool_import_test gpu_pool_process_test gpu_pool_shutdown_test gpu_pool_shutdown_cuda_test)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

# From here on a failure is recorded and the script goes on, so one run on a GPU machine gives
# every test result and every figure it can; the exit status says whether anything failed.
failures=()

step "the bare CUDA checks (pinning, IPC; no kvtier code)"
# Exit 11-13: the environment refuses pinning or IPC (tests/gpu/cuda_env_check.cc); the tests
# that need them will fail for that reason, not for kvtier's.
"$build/tests/kvtier_cuda_env_check" || failures+=("bare CUDA checks (exit $?): environment")

step "ctest -L gpu"
# KVTIER_REQUIRE_GPU turns "no device, skipped" into a failure: here a device must be usable.
export KVTIER_REQUIRE_GPU=1
(cd "$build" && ctest -L gpu --output-on-failure --timeout 120 --no-tests=error) ||
  failures+=("ctest -L gpu")
step "CPU tests of the same code (fake tier, fake copier, reference)"
(cd "$build" && ctest -R 'FakeGpuTier|Fake/DeviceTierTest|MakeGpuTier|PagedLayout|FakeDeviceCopier|MakeDeviceCopier|PagedBatch|PagedCopyPlan|SimulatedPagedBatch|ProbeTest|DeviceTransferTest|GpuPoolImport|GpuPoolProcessTest|GpuPoolShutdownTest' \
  -LE gpu --output-on-failure --timeout 120) || failures+=("CPU tests")

step "benchmark"
scratch=$(mktemp -d /tmp/kvtier-gpu-run-XXXXXX)
daemon_pid=""
cleanup() {
  if [ -n "$daemon_pid" ]; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$scratch"
}
trap cleanup EXIT
# The client figures measure the host arena path: no GPU tier, so no block is promoted out of the
# arena between repetitions (the ipc figures run their own server over a GPU pool).
"$build/bin/kvtierd" --unix "$scratch/kvtierd.sock" --port 0 --http-port 0 --host-bytes 4GiB \
  --data-dir "$scratch/data" --nvme-bytes 0 --gpu-bytes 0 --log-level warn &
daemon_pid=$!
for _ in $(seq 200); do
  [ -S "$scratch/kvtierd.sock" ] && break
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.1
done
: >"$build/gpu-bench.txt"
for section in client ipc paged; do
  if [ "$section" = client ] && [ ! -S "$scratch/kvtierd.sock" ]; then
    failures+=("kvtierd did not start: no client figures")
    continue
  fi
  timeout 120 "$build/bin/kvtier_gpu_bench" --section "$section" \
    --url "unix://$scratch/kvtierd.sock" | tee -a "$build/gpu-bench.txt" ||
    failures+=("benchmark section $section")
done

step "figures (targets: h2d/d2h >= 0.85, ipc_d2d >= 0.8, paged_gather >= 0.8)"
grep -E '_ratio_' "$build/gpu-bench.txt" || true
if [ ${#failures[@]} -gt 0 ]; then
  fail "$(printf '%s; ' "${failures[@]}")log: $log"
fi
echo "tests/gpu/run.sh: OK in $(($(date +%s) - started)) s; log: $log"
