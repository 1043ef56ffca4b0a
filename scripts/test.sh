#!/usr/bin/env bash
# Installs what is missing, then builds and runs every test: the release build, the same suite
# under AddressSanitizer + UndefinedBehaviorSanitizer, and the concurrency suites under
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

echo "== build (release) =="
scripts/build.sh release
run_ctest release

echo "== build (asan: ASan + UBSan) =="
scripts/build.sh asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_ctest asan

echo "== build (tsan) =="
scripts/build.sh tsan
TSAN_OPTIONS=halt_on_error=1 run_ctest tsan -L concurrency
