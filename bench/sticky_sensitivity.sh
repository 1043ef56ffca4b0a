#!/usr/bin/env bash
# Prints the sensitivity table of docs/simulate.md: how the `sticky` policy's block hit ratio
# moves against LRU's when one of its parameters changes (StickyLruPolicy::Params; `kvtier
# simulate --policy-params`), on the two traces of ../shared/traces (or TRACE_DIR).
#
#   bench/sticky_sensitivity.sh [TRACE_DIR]
#
# For each setting: the gain over LRU at 5,000 blocks on each trace, and the worst ratio to LRU
# over the capacities of the docs' sticky table. Each figure is one `build/bin/kvtier simulate
# TRACE --capacity-blocks C --policy sticky --policy-params SETTING --block-tokens B --json`
# run against the same with `--policy lru`. Needs the release build; about 2 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
traces=${1:-../shared/traces}
conversation=$traces/mooncake_conversation_trace.jsonl
agentic=$traces/agentic_coding_trace.jsonl
capacities=(500 1000 1500 2000 3000 4000 5000 7000 8500 10000 12000 15000)
settings=("" quantile=0.6 quantile=0.9 sample=8 sample=32 ghost=0.5 ghost=4 window=1024
  window=16384 memory=4 memory=64 margin=1 margin=3)

hits() {  # trace block_tokens capacity policy [params]
  local args=("$1" --capacity-blocks "$3" --policy "$4" --block-tokens "$2" --json)
  [ -n "${5:-}" ] && args+=(--policy-params "$5")
  build/bin/kvtier simulate "${args[@]}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["hit_blocks"])'
}

declare -A lru
for c in "${capacities[@]}"; do
  lru[conversation/$c]=$(hits "$conversation" 512 "$c" lru)
  lru[agentic/$c]=$(hits "$agentic" 64 "$c" lru)
done

echo "| setting | conversation gain at 5,000 | worst ratio (at) | agentic gain at 5,000 | worst ratio (at) |"
echo "|---|---:|---:|---:|---:|"
for s in "${settings[@]}"; do
  row="| ${s:-defaults} |"
  for t in conversation agentic; do
    if [ "$t" = conversation ]; then file=$conversation tokens=512; else file=$agentic tokens=64; fi
    gain="" worst=9 worst_at=""
    for c in "${capacities[@]}"; do
      h=$(hits "$file" "$tokens" "$c" sticky "$s")
      r=$(awk -v a="$h" -v b="${lru[$t/$c]}" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 1) }')
      [ "$c" = 5000 ] && gain=$r
      if awk -v r="$r" -v w="$worst" 'BEGIN { exit !(r < w) }'; then worst=$r worst_at=$c; fi
    done
    row+=" $gain | $worst ($worst_at) |"
  done
  echo "$row"
done
