#!/usr/bin/env bash
# What kvtierd's metrics cost a client: `kvtier bench` throughput against a kvtierd with
# metrics.histograms and metrics.history on (the defaults) over the same against one with both
# off, in the same run.
# Prints "NAME VALUE UNIT" lines (bench/README.md):
#   metrics_overhead_ratio          blocks/s with metrics on / blocks/s off (median of the
#                                   rounds' ratios; target >= 0.97)
#   metrics_{on,off}_blocks_per_s   the medians behind it
#   metrics_overhead_cpu_ratio      the daemon's CPU time per block off / on (median of the rounds'
#                                   ratios): the same cost seen through what a busy machine moves
#                                   less than throughput
#   metrics_{on,off}_daemon_cpu_us_per_block  the medians behind it
# Both daemons (host tier only) run side by side; each round runs one `kvtier bench` against each,
# which goes first alternating, so that the two runs of a round see the same load on the machine.
# Small blocks over the shared-memory path make a run many short commands, so that the
# per-command cost of timing them shows. On a shared machine single runs spread widely (by a factor
# of two on the 2-core machine of bench/README.md), hence many rounds and the median of their
# ratios. --quick: 5 rounds of 1,024 blocks per client instead
# of 15 of 4,096. METRICS_BENCH_KEEP=DIR keeps every run's summary there, to look at the spread.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${KVTIER_BIN_DIR:-build/bin}
. bench/kvtierd_lib.sh

rounds=15
count=4096
if bench_quick "$@"; then
  rounds=5
  count=1024
fi
bench_tmpdir metrics-overhead
printf 'metrics:\n  histograms: true\n  history: true\n' >"$tmp/on.yaml"
printf 'metrics:\n  histograms: false\n  history: false\n' >"$tmp/off.yaml"

# start KIND: a daemon with KIND.yaml on $tmp/KIND.sock; its pid in KIND_pid.
start() {
  start_kvtierd "$tmp/$1.sock" --config "$tmp/$1.yaml" --host-bytes 512MiB --nvme-bytes 0 \
    --data-dir "$tmp/$1.data"
  printf -v "$1_pid" '%s' "$pid"
  pid=""
}
# kvtierd_lib.sh stops one daemon ($pid) on exit; the other one is stopped here first.
trap 'rc=$?; for p in ${on_pid:-} ${off_pid:-}; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; (exit $rc); bench_cleanup' EXIT
start on
start off

# CPU time of a process, all its threads, in nanoseconds (schedstat: time on a CPU).
cpu_ns() {
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ns += $1} END {printf "%.0f", ns}'
}

# run KIND ROUND: one bench against the KIND daemon; leaves KIND.ROUND.json (its summary) and
# KIND.ROUND.cpu (the daemon's CPU nanoseconds during it).
run() {
  local daemon_pid=${1}_pid
  local before
  before=$(cpu_ns "${!daemon_pid}")
  "$bin/kvtier" bench --url "unix://$tmp/$1.sock" --path shm --block-bytes 16KiB --concurrency 2 \
    --batch 4 --count "$count" --json >"$tmp/$1.$2.json"
  echo $(($(cpu_ns "${!daemon_pid}") - before)) >"$tmp/$1.$2.cpu"
}

for round in $(seq "$rounds"); do
  if [ $((round % 2)) -eq 1 ]; then
    run on "$round"
    run off "$round"
  else
    run off "$round"
    run on "$round"
  fi
done

[ -n "${METRICS_BENCH_KEEP:-}" ] && cp -r "$tmp" "$METRICS_BENCH_KEEP"
python3 - "$tmp" "$rounds" <<'PY'
import json, os, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])

def blocks_per_s(kind, round_):
    """Puts and gets of the run together: blocks moved over the time both phases took."""
    run = json.load(open(os.path.join(tmp, f"{kind}.{round_}.json")))
    phases = [run["put"], run["get"]]
    for p in phases:
        if p["blocks_failed"]:
            sys.stderr.write(f"metrics_overhead_bench: {kind} round {round_}: "
                             f"{p['blocks_failed']} blocks failed\n")
    return sum(p["blocks_ok"] for p in phases) / sum(p["wall_s"] for p in phases)

def cpu_us_per_block(kind, round_):
    """The daemon's CPU time over the blocks the run moved."""
    run = json.load(open(os.path.join(tmp, f"{kind}.{round_}.json")))
    cpu_ns = int(open(os.path.join(tmp, f"{kind}.{round_}.cpu")).read())
    return cpu_ns / 1000 / (run["put"]["blocks_ok"] + run["get"]["blocks_ok"])

r = range(1, rounds + 1)
on, off = [blocks_per_s("on", i) for i in r], [blocks_per_s("off", i) for i in r]
cpu_on, cpu_off = [cpu_us_per_block("on", i) for i in r], [cpu_us_per_block("off", i) for i in r]
print(f"metrics_overhead_ratio {statistics.median(a / b for a, b in zip(on, off)):.4g} ratio")
print(f"metrics_on_blocks_per_s {statistics.median(on):.4g} blocks/s")
print(f"metrics_off_blocks_per_s {statistics.median(off):.4g} blocks/s")
print(f"metrics_overhead_cpu_ratio {statistics.median(b / a for a, b in zip(cpu_on, cpu_off)):.4g} ratio")
print(f"metrics_on_daemon_cpu_us_per_block {statistics.median(cpu_on):.4g} us")
print(f"metrics_off_daemon_cpu_us_per_block {statistics.median(cpu_off):.4g} us")
PY
