#!/usr/bin/env bash
# tests/gpu/prepare.sh OUT: builds, on this machine, everything the GPU check needs into the one
# folder OUT, to be copied to a machine that has an NVIDIA GPU and its driver and nothing else (no
# compiler, no network, no kvtier dependencies) and run there as `OUT/run.sh` (tests/gpu/README.md).
#
# The build is the `cuda` preset (build-cuda/: CUDA on, machine code for sm_90 plus its PTX, which
# newer GPUs compile at load; run paths $ORIGIN/../lib), only the GPU targets. Its C++ objects are
# those of the release build, so ccache serves them when the release tree was built first.
# OUT gets:
#   bin/      the GPU tests, their child programs, kvtierd, the GPU benchmark and the bare CUDA
#             environment check, without debug info
#   lib/      the shared libraries they load, except the C library (libc, libm, the loader) and
#             the driver's libcuda, which the GPU machine has; the CUDA runtime is linked in
#   lib/cxx/  libstdc++ and libgcc_s, used by run.sh only where the GPU machine's own are older
#   run.sh    the check (tests/gpu/bundle_run.sh); MANIFEST what was built from which commit
# Fails when OUT would exceed 64 MiB or a binary could not find a library.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: tests/gpu/prepare.sh OUT" >&2; exit 2; }
cd "$(dirname "$0")/../.."
root="$PWD"
out="$1"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
limit_bytes=$((64 << 20))

command -v nvcc >/dev/null || { echo "prepare.sh: nvcc not found (CUDA toolkit)" >&2; exit 1; }
targets=(kvtierd kvtier_gpu_bench kvtier_cuda_env_check kvtier_ipc_child kvtier_gpu_pool_child
  cuda_probe_test cuda_gpu_test gpu_tier_test client_gpu_cuda_test gpu_pool_cuda_test
  device_transfer_cuda_test gpu_pool_shutdown_cuda_test)
cmake --preset cuda >/dev/null
cmake --build --preset cuda -j "$(nproc)" --target "${targets[@]}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/cxx"
build="$root/build-cuda"
for target in "${targets[@]}"; do
  binary="$build/bin/$target"
  [ -x "$binary" ] || binary="$build/tests/$target"
  [ -x "$binary" ] || { echo "prepare.sh: $target was not built" >&2; exit 1; }
  strip --strip-debug -o "$out/bin/$target" "$binary"
done

# Every library the binaries load, resolved here; the C library and the driver stay behind.
declare -A copied=()
for binary in "$out"/bin/*; do
  if ldd "$binary" | grep -q 'not found'; then
    echo "prepare.sh: $binary: a library is missing here" >&2
    ldd "$binary" >&2
    exit 1
  fi
  while read -r name path; do
    case "$name" in
      linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | \
        librt.so.* | libcuda.so.* | libnvidia*) continue ;;
      libstdc++.so.* | libgcc_s.so.*) dest="$out/lib/cxx/$name" ;;
      *) dest="$out/lib/$name" ;;
    esac
    [ -n "${copied[$name]:-}" ] && continue
    copied[$name]=1
    strip --strip-debug -o "$dest" "$(readlink -f "$path")"
  done < <(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done

cp tests/gpu/bundle_run.sh "$out/run.sh"
chmod +x "$out/run.sh"
{
  echo "kvtier GPU check, prepared $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'); CUDA architectures 90 (sm_90 + compute_90 PTX)"
  for libs in lib lib/cxx; do
    echo "$libs: needs glibc $(objdump -T "$out"/bin/* "$out/$libs"/*.so* 2>/dev/null |
      grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | sed 's/GLIBC_//') or newer"
  done
  (cd "$out" && find bin lib -type f -printf '%s %p\n' | sort -k2)
} >"$out/MANIFEST"

size_bytes=$(du -sb "$out" | cut -f1)
echo "prepare.sh: $out: $((size_bytes >> 20)) MiB ($size_bytes bytes; limit 64 MiB)"
if [ "$size_bytes" -gt "$limit_bytes" ]; then
  echo "prepare.sh: $out is larger than 64 MiB" >&2
  exit 1
fi
