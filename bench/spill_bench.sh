#!/usr/bin/env bash
# Puts through kvtierd while its host tier is full, so that every put needs a demotion to NVMe,
# against fio's sequential O_DIRECT write on the same file system in the same run. Prints
# "NAME VALUE UNIT" lines (bench/README.md):
#   spill_put_ratio_to_fio        put bandwidth through the daemon / fio's write bandwidth (the
#                                 faster of a fio run before the daemon's and one after)
#   spill_put_p99_ratio_to_p50    put latency tail under that load
#   spill_get_p99_ratio_to_p50    get latency tail of a concurrent reader of NVMe-resident blocks
#   spill_max_stall_ms            the longest single put or get of those
#   spill_nvme_syncs, spill_longest_sync_ms  the NVMe tier's syncs (disk flushes) during the run
#                                 and the longest: a flush stalls the disk's reads and writes
# The directory is $KVTIER_NVME_BENCH_DIR, else $TMPDIR, else /tmp (point it at the NVMe device
# to measure); removed on exit, with the daemon stopped. --quick: less data.
# KVTIER_SPILL_CACHE_SYNC_MS sets nvme.cache_sync_interval_ms (default: kvtierd's own, 60 s, longer
# than a run; 1000 shows what a flush every second costs on the disk).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${KVTIER_BIN_DIR:-build/bin}
. bench/kvtierd_lib.sh

# 4 writers x `count` blocks of 2 MiB through a 256 MiB host tier: all but the last ~128 blocks
# must go down to NVMe. The reader puts its own 64 blocks first (they are demoted by the writers'
# load) and reads them back while the writers run.
count=256
if bench_quick "$@"; then count=96; fi
bench_tmpdir spill-bench

# fio before and after the daemon's run: 2 MiB blocks at queue depth 16, O_DIRECT, the same amount
# the writers put. A shared machine's disk can change its speed threefold within minutes, so the
# ratio is taken against the faster of the two runs (the lower ratio), and both are printed.
total_mib=$((4 * count * 2))
fio_before_kibps=$(fio_write_kibps "$total_mib")

sock="$tmp/kvtierd.sock"
config=()
if [ -n "${KVTIER_SPILL_CACHE_SYNC_MS:-}" ]; then
  printf 'nvme:\n  cache_sync_interval_ms: %s\n' "$KVTIER_SPILL_CACHE_SYNC_MS" >"$tmp/kvtierd.yaml"
  config=(--config "$tmp/kvtierd.yaml")
fi
start_kvtierd "$sock" "${config[@]}" --host-bytes 256MiB --nvme-bytes "$((total_mib + 1024))MiB" \
  --data-dir "$tmp/data"

# Fill the host tier first, so that the measured puts all meet a full one.
"$bin/kvtier" bench --url "unix://$sock" --block-bytes 2MiB --concurrency 2 --count 80 \
  --warmup 0 --keep --json >/dev/null
"$bin/kvtier" bench --url "unix://$sock" --block-bytes 2MiB --concurrency 1 --count 64 \
  --warmup 0 --json >"$tmp/reader.json" &
reader=$!
"$bin/kvtier" bench --url "unix://$sock" --block-bytes 2MiB --concurrency 4 --count "$count" \
  --warmup 0 --json >"$tmp/writers.json"
wait "$reader"
"$bin/kvtier" stats --url "unix://$sock" --json >"$tmp/stats.json"
stop_kvtierd
rm -rf "$tmp/data"
fio_after_kibps=$(fio_write_kibps "$total_mib")

python3 - "$tmp/writers.json" "$tmp/reader.json" "$fio_before_kibps" "$fio_after_kibps" \
  "$tmp/stats.json" <<'PY'
import json, sys
writers, reader = (json.load(open(p)) for p in sys.argv[1:3])
fio_before, fio_after = (float(v) / 1024 for v in sys.argv[3:5])
fio_mib = max(fio_before, fio_after)
nvme = next(t for t in json.load(open(sys.argv[5]))["tiers"] if t["tier"] == "nvme")["device"]
put, get = writers["put"], reader["get"]
for name, phase in (("writers' put", put), ("reader's get", get)):
    if phase["blocks_failed"]:
        sys.stderr.write(f"spill_bench: {phase['blocks_failed']} failed blocks in the {name}\n")
put_mib = put["gib_per_s"] * 1024
print(f"spill_put_mib_per_s {put_mib:.4g} MiB/s")
print(f"spill_fio_write_mib_per_s {fio_mib:.4g} MiB/s")
print(f"spill_fio_write_before_mib_per_s {fio_before:.4g} MiB/s")
print(f"spill_fio_write_after_mib_per_s {fio_after:.4g} MiB/s")
print(f"spill_put_ratio_to_fio {put_mib / fio_mib:.4g} ratio")
print(f"spill_put_p99_ratio_to_p50 {put['latency_us']['p99'] / put['latency_us']['p50']:.4g} ratio")
print(f"spill_get_p99_ratio_to_p50 {get['latency_us']['p99'] / get['latency_us']['p50']:.4g} ratio")
stall = max(put["latency_us"]["max"], get["latency_us"]["max"]) / 1000
print(f"spill_max_stall_ms {stall:.4g} ms")
print(f"spill_nvme_syncs {nvme['syncs']:.0f} count")
print(f"spill_longest_sync_ms {nvme['longest_sync_seconds'] * 1000:.4g} ms")
PY
