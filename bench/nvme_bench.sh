#!/usr/bin/env bash
# Runs fio and kvtier_nvme_bench on the same file system, same block size (2 MiB) and queue depth,
# and prints the NVMe figures (bench/README.md). The directory is $KVTIER_NVME_BENCH_DIR, else
# $TMPDIR, else /tmp; point it at the NVMe device you mean to measure. Removed on exit.
# --quick: 128 MiB instead of 1 GiB, and fewer blocks for the restart figure.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${KVTIER_BIN:-build/bin}"
blocks=512
qd=8
for arg in "$@"; do
  if [ "$arg" = "--quick" ]; then blocks=64; fi
done
base="${KVTIER_NVME_BENCH_DIR:-${TMPDIR:-/tmp}}"
dir="$(mktemp -d "$base/kvtier-nvme-bench.XXXXXX")"
trap 'rm -rf "$dir"' EXIT

# fio's bandwidth in KiB/s for one direction over a fresh file of the bench's size.
fio_kibps() {
  local rw="$1"
  fio --name="kvtier-$rw" --filename="$dir/fio.data" --size="$((blocks * 2))M" --bs=2M \
      --iodepth="$qd" --ioengine=io_uring --direct=1 --rw="$rw" --output-format=json \
    | python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$2']['bw'])"
}
write_kibps="$(fio_kibps write write)"
read_kibps="$(fio_kibps read read)"
rm -f "$dir/fio.data"
echo "fio_write_mib_per_s $(python3 -c "print(round($write_kibps/1024, 1))") MiB/s"
echo "fio_read_mib_per_s $(python3 -c "print(round($read_kibps/1024, 1))") MiB/s"
"$bin/kvtier_nvme_bench" --dir "$dir" --blocks "$blocks" --qd "$qd" \
  --fio-write-kibps "$write_kibps" --fio-read-kibps "$read_kibps" "$@"
