#!/usr/bin/env bash
# What KVT.REFRESH is worth through kvtierd: `kvtier replay` of the agentic coding trace (64-token
# blocks of 4 KiB) against a kvtierd whose host tier holds C blocks and nothing below, with and
# without the replay's refresh after each request's puts (--no-refresh), for the lru and sticky
# policies. Prints a markdown table of block hit ratios (docs/simulate.md, "The order kvtierd
# sees"), and the replay's refused puts (failed_puts: a full tier's sticky refusals, or a request
# longer than the tier).
#
#   bench/refresh_replay.sh [TRACE] [CAPACITY_BLOCKS...]    (default: ../shared/traces, 5000 1000)
#
# Needs the release build; about 15 s per cell. The daemon's files go under $TMPDIR or /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${KVTIER_BIN_DIR:-build/bin}
trace=${1:-../shared/traces/agentic_coding_trace.jsonl}
shift || true
capacities=("$@")
[ ${#capacities[@]} -eq 0 ] && capacities=(5000 1000)
. bench/kvtierd_lib.sh
bench_tmpdir refresh-replay
printf 'tiers:\n  slab_bytes: 1MiB\n' >"$tmp/kvtierd.yaml"

run() {  # policy capacity refresh(0|1): prints "hit_ratio failed_puts"
  local sock="$tmp/kvtierd.sock" extra=()
  [ "$3" = 0 ] && extra=(--no-refresh)
  start_kvtierd "$sock" --config "$tmp/kvtierd.yaml" --host-bytes $(($2 * 4096)) --nvme-bytes 0 \
    --policy "$1" --data-dir "$tmp/data-$1-$2-$3"
  "$bin/kvtier" replay "$trace" --url "unix://$sock" --block-bytes 4KiB --block-tokens 64 \
    --json "${extra[@]}" 2>/dev/null |
    python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["block_hit_ratio"], r["failed_puts"])'
  stop_kvtierd
}

echo "| capacity (blocks) | policy | no refresh | refresh | refresh / no refresh | refused puts (no refresh, refresh) |"
echo "|---:|---|---:|---:|---:|---:|"
for c in "${capacities[@]}"; do
  for p in lru sticky; do
    read -r without failed_without < <(run "$p" "$c" 0)
    read -r with failed_with < <(run "$p" "$c" 1)
    awk -v c="$c" -v p="$p" -v a="$without" -v b="$with" -v fa="$failed_without" -v fb="$failed_with" \
      'BEGIN { printf "| %s | %s | %.2f%% | %.2f%% | %.3f | %s, %s |\n", c, p, 100 * a, 100 * b, (a > 0 ? b / a : 1), fa, fb }'
  done
done
