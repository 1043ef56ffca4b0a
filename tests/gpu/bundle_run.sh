#!/usr/bin/env bash
# run.sh of a folder made by tests/gpu/prepare.sh: the GPU check of kvtier on a machine that has an
# NVIDIA GPU and its driver and nothing else. Run it from anywhere: `OUT/run.sh`.
#
# In order, each step under its own time limit, the whole run under 5 minutes (KVTIER_GPU_CHECK_S,
# default 285 s; a step gets what is left when less than its own limit remains):
#   load     the binaries load here (with the bundled libstdc++, else the system's)
#   env      kvtier_cuda_env_check: the device, then cudaHostRegister and a CUDA IPC export and
#            import on plain buffers, with no kvtier code
#   unit     the GPU unit tests: probe, pinned ranges, the GPU tier, the paged kernel vs the CPU
#            reference
#   order    the caller's stream ordering and stale CUDA errors
#   ipc      two processes: an IPC import of a raw allocation and of the GPU tier's pool, and a
#            client that copies leased blocks out of a server's pool
#   kill     an importer (and a client holding leases) killed while holding its import
#   exit     kvtierd stopped while a client holds its pool's import: the client survives, and one
#            that answers -SHUTDOWN by detaching lets the daemon exit early
#   client   the client's GPU put and get against kvtierd
#   bench    kvtier_gpu_bench against kvtierd: the h2d/d2h, IPC and paged-gather figures
# The GPU tests run with KVTIER_REQUIRE_GPU=1: a test that cannot reach the device fails.
#
# Exit status:
#   0  every step passed
#   1  a kvtier check failed where the environment passed the bare CUDA checks: a project bug
#   2  the binaries do not load here (C library older than MANIFEST says, or a missing library),
#      or the driver is older than the CUDA runtime they carry (MANIFEST names the toolkit)
#   3  no CUDA device (no driver, no GPU visible, or the driver refuses): nothing else was run
#   4  the environment refuses pinned memory or CUDA IPC (a container or sandbox): the steps that
#      need them were run anyway and their failures are marked as expected
set -uo pipefail
cd "$(dirname "$0")"
here="$PWD"
started=$SECONDS
budget_s="${KVTIER_GPU_CHECK_S:-285}"
deadline=$((started + budget_s))
failures=()
refused=""  # "pin", "ipc" or "pin ipc": what the environment refused

say() { echo "run.sh: $*"; }
header() { echo; echo "== $* ($((SECONDS - started)) s) =="; }

# The limit for a step that wants $1 seconds: less when the run's deadline is nearer.
limit_for() {
  local left=$((deadline - SECONDS - 5))
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# step NAME SECONDS NEEDS COMMAND...: runs COMMAND under a time limit and records a failure.
# NEEDS is "pin", "ipc" or "-": a failure of a step whose need the environment refused is expected.
step() {
  local name="$1" want="$2" needs="$3"
  shift 3
  local limit
  limit=$(limit_for "$want")
  header "$name (limit ${limit} s)"
  if [ "$limit" -lt 5 ]; then
    failures+=("$name: not run, the 5-minute budget is spent")
    return
  fi
  timeout -k 5 "$limit" "$@"
  local rc=$?
  [ "$rc" -eq 0 ] && return
  local why="exit $rc"
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && why="timed out after ${limit} s"
  if [ "$needs" != "-" ] && [[ " $refused " == *" $needs "* ]]; then
    failures+=("$name: $why (expected: this environment refuses $needs)")
  else
    failures+=("$name: $why")
  fi
}

header "load"
# Prefer the libstdc++ the binaries were built with; a C library older than it needs (MANIFEST)
# cannot load it, and then the system's own libstdc++ is tried.
load_error=""
if load_error=$(LD_LIBRARY_PATH="$here/lib/cxx" timeout 20 bin/kvtierd --help 2>&1 >/dev/null); then
  export LD_LIBRARY_PATH="$here/lib/cxx${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "binaries load with the bundled libstdc++"
elif system_error=$(timeout 20 bin/kvtierd --help 2>&1 >/dev/null); then
  say "binaries load with the system's libstdc++ (the bundled one: $load_error)"
else
  say "the binaries do not load on this machine:"
  echo "$load_error"
  echo "$system_error"
  sed -n '1,4p' MANIFEST 2>/dev/null
  exit 2
fi

header "env: the bare CUDA checks (no kvtier code)"
command -v nvidia-smi >/dev/null &&
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
timeout -k 5 "$(limit_for 60)" bin/kvtier_cuda_env_check
env_rc=$?
case "$env_rc" in
  0) say "the environment allows pinning and CUDA IPC" ;;
  10)
    say "no CUDA device: nothing to check here (exit 3)"
    exit 3
    ;;
  15)
    say "the driver is older than the CUDA runtime these binaries carry: rebuild the folder with"
    say "a CUDA toolkit no newer than the driver (tests/gpu/README.md); nothing else was run (exit 2)"
    sed -n '1,4p' MANIFEST 2>/dev/null
    exit 2
    ;;
  11) refused="pin" ;;
  12) refused="ipc" ;;
  13) refused="pin ipc" ;;
  *)
    say "the bare CUDA checks failed (exit $env_rc): the device or driver is unusable here"
    failures+=("env: bare CUDA checks exit $env_rc")
    ;;
esac
if [ -n "$refused" ]; then
  say "THE ENVIRONMENT REFUSES: $refused (a container or sandbox limit, not a kvtier bug)"
fi

export KVTIER_REQUIRE_GPU=1
step "unit: probe" 30 - bin/cuda_probe_test
step "unit: pinned host ranges" 60 pin bin/cuda_gpu_test --gtest_filter='PinnedHostRange*:IpcImportTest.*'
step "unit: GPU tier" 90 - bin/gpu_tier_test --gtest_filter='-*AnotherProcess*'
step "unit: paged kernel vs the CPU reference" 90 - \
  bin/client_gpu_cuda_test --gtest_filter='-*Order*:*Stale*'
step "order: the copier waits for the caller's stream; stale errors" 60 - \
  bin/client_gpu_cuda_test --gtest_filter='*Order*:*Stale*'
step "order: put and get through kvtierd after the caller's stream" 60 pin \
  bin/device_transfer_cuda_test --gtest_filter='*Order*'
step "ipc: raw allocation in another process" 60 ipc \
  bin/cuda_gpu_test --gtest_filter='IpcTest.AnotherProcess*'
step "ipc: the GPU tier's pool in another process" 60 ipc \
  bin/gpu_tier_test --gtest_filter='*AnotherProcess*'
step "ipc: a client copies leased blocks out of a server's pool" 90 ipc \
  bin/gpu_pool_cuda_test --gtest_filter='*AnotherProcess*'
step "kill: an importer killed while holding its import" 60 ipc \
  bin/cuda_gpu_test --gtest_filter='*Killed*'
step "kill: a client killed while holding its import and leases" 60 ipc \
  bin/gpu_pool_cuda_test --gtest_filter='*Killed*'
step "exit: kvtierd stopped while a client holds its pool's import" 90 ipc \
  bin/gpu_pool_shutdown_cuda_test
step "client: GPU put and get against kvtierd" 120 pin \
  bin/device_transfer_cuda_test --gtest_filter='-*Order*'

header "bench: kvtier_gpu_bench (targets: h2d/d2h >= 0.85, ipc_d2d >= 0.8, paged_gather >= 0.8)"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-gpu-check-XXXXXX")
daemon_pid=""
cleanup() {
  if [ -n "$daemon_pid" ]; then
    kill "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
  fi
  rm -rf "$scratch"
}
trap cleanup EXIT
# The client figures measure the host arena path: no GPU tier, so no block leaves the arena
# between repetitions (the ipc figures run their own server over a GPU pool).
timeout -k 5 "$(limit_for 240)" bin/kvtierd --unix "$scratch/kvtierd.sock" --port 0 --http-port 0 \
  --host-bytes 4GiB --data-dir "$scratch/data" --nvme-bytes 0 --gpu-bytes 0 --log-level warn &
daemon_pid=$!
for _ in $(seq 100); do
  [ -S "$scratch/kvtierd.sock" ] && break
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.1
done
[ -S "$scratch/kvtierd.sock" ] || failures+=("bench: kvtierd did not start")
for section in client ipc paged; do
  step "bench: $section" 60 "$([ "$section" = ipc ] && echo ipc || echo -)" \
    bin/kvtier_gpu_bench --section "$section" --url "unix://$scratch/kvtierd.sock"
done

header "summary"
if [ ${#failures[@]} -eq 0 ]; then
  say "OK: every step passed in $((SECONDS - started)) s"
  exit 0
fi
printf 'run.sh: FAILED: %s\n' "${failures[@]}"
if [ -n "$refused" ]; then
  say "the environment refuses $refused: see the env step; exit 4"
  exit 4
fi
say "$((SECONDS - started)) s; exit 1"
exit 1
