#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release). Binaries land in build/bin/ for the
# release preset, build-<preset>/bin/ for the others.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
cmake --preset "$preset" "$@" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
