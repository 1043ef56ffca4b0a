#!/usr/bin/env bash
# The cache-policy figures of issue 18, from `kvtier simulate` on the two traces in
# $KVTIER_TRACE_DIR (default ../shared/traces; see the README there). Prints "NAME VALUE UNIT":
#   simulate_million_refs_per_s           LRU at 5,000 blocks on the agentic trace, best of 3 runs
#                                         (wall time, reading and parsing included)
#   policy_gain_over_lru_5k_{conversation,agentic}
#                                         the default policy's block hit ratio over LRU's
#   policy_share_of_belady_5k_{conversation,agentic}
#                                         the default policy's block hit ratio over Belady's
# The default policy is what `kvtier simulate` runs without --policy. Expects build/bin/kvtier
# (bench/run.sh builds it). A trace that is absent is skipped with a note on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KVTIER_TRACE_DIR:-../shared/traces}
kvtier=build/bin/kvtier
runs=3
[ "${1:-}" = --quick ] && runs=1

field() {  # trace block_tokens field [flags...]
  local trace=$1 block_tokens=$2 name=$3
  shift 3
  "$kvtier" simulate "$trace" --capacity-blocks 5000 --block-tokens "$block_tokens" --json "$@" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$name"
}

agentic=$dir/agentic_coding_trace.jsonl
if [ -f "$agentic" ]; then
  best=0
  for _ in $(seq "$runs"); do
    rate=$(field "$agentic" 64 million_refs_per_s --policy lru)
    best=$(awk -v a="$best" -v b="$rate" 'BEGIN { print (b > a ? b : a) }')
  done
  printf 'simulate_million_refs_per_s %.2f Mrefs/s\n' "$best"
fi

for pair in conversation:mooncake_conversation_trace.jsonl:512 agentic:agentic_coding_trace.jsonl:64; do
  IFS=: read -r name file block_tokens <<<"$pair"
  trace=$dir/$file
  if [ ! -f "$trace" ]; then
    echo "simulate_bench: no $trace, skipping $name" >&2
    continue
  fi
  default=$(field "$trace" "$block_tokens" block_hit_ratio)
  lru=$(field "$trace" "$block_tokens" block_hit_ratio --policy lru)
  belady=$(field "$trace" "$block_tokens" block_hit_ratio --policy belady)
  awk -v n="$name" -v d="$default" -v l="$lru" -v b="$belady" 'BEGIN {
    printf "policy_gain_over_lru_5k_%s %.3f ratio\n", n, d / l
    printf "policy_share_of_belady_5k_%s %.3f ratio\n", n, d / b }'
done
