#!/usr/bin/env bash
# Runs fio and kvtier_nvme_bench on the same file system, same block size (2 MiB) and queue depth,
# and prints the NVMe figures (bench/README.md). The directory is $KVTIER_NVME_BENCH_DIR, else
# $TMPDIR, else /tmp; point it at the NVMe device you mean to measure. Removed on exit.
# Five rounds of fio then the tier; every figure is the median over them.
# --quick: 128 MiB instead of 1 GiB, one round, and fewer blocks for the restart figure.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${KVTIER_BIN:-build/bin}"
blocks=512
qd=8
rounds=5
for arg in "$@"; do
  if [ "$arg" = "--quick" ]; then blocks=64 rounds=1; fi
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
# The device's speed drifts from one second to the next on shared machines, so fio and the tier
# take turns for several rounds, each ratio against the fio run just before it, and every figure
# is the median over the rounds.
out="$dir/rounds.txt"
for round in $(seq "$rounds"); do
  write_kibps="$(fio_kibps write write)"
  read_kibps="$(fio_kibps read read)"
  rm -f "$dir/fio.data"
  echo "fio_write_mib_per_s $(python3 -c "print(round($write_kibps/1024, 1))") MiB/s" >>"$out"
  echo "fio_read_mib_per_s $(python3 -c "print(round($read_kibps/1024, 1))") MiB/s" >>"$out"
  # The restart figures need one round only.
  restart=()
  [ "$round" -lt "$rounds" ] && restart=(--no-restart)
  "$bin/kvtier_nvme_bench" --dir "$dir/round-$round" --blocks "$blocks" --qd "$qd" \
    --fio-write-kibps "$write_kibps" --fio-read-kibps "$read_kibps" "${restart[@]}" "$@" >>"$out"
  rm -rf "$dir/round-$round"
done
# "NAME VALUE UNIT" lines: the median of each name, in the order the names first appear. Other
# lines (the tier's log) go to stderr.
python3 - "$out" <<'PY'
import re, statistics, sys
values, units = {}, {}
for line in open(sys.argv[1]):
    m = re.fullmatch(r"(\w+) (\S+) (\S+)", line.strip())
    try:
        value = float(m.group(2)) if m else None
    except ValueError:
        value = None
    if value is None:
        sys.stderr.write(line)
        continue
    values.setdefault(m.group(1), []).append(value)
    units[m.group(1)] = m.group(3)
for name, v in values.items():
    print(f"{name} {statistics.median(v):.4g} {units[name]}")
PY
