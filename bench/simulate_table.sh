#!/usr/bin/env bash
# Prints the tables of docs/simulate.md for one trace: block hit ratio and saved prefill cost
# against capacity for each eviction policy of `kvtier simulate` and for the offline optimum.
#
#   bench/simulate_table.sh TRACE BLOCK_TOKENS CAPACITY...
#
# Runs build/bin/kvtier (build it with the release preset first) with the default prefill cost
# model. Each cell is one `kvtier simulate TRACE --capacity-blocks C --policy P --block-tokens
# BLOCK_TOKENS --json` run, so any figure can be checked on its own.
set -euo pipefail
cd "$(dirname "$0")/.."
trace=$1 block_tokens=$2
shift 2
policies=(lru arc s3fifo tinylfu belady)
titles=(LRU ARC S3-FIFO TinyLFU Belady)

declare -A block prefill optimal
for c in "$@"; do
  for p in "${policies[@]}"; do
    read -r block["$c/$p"] prefill["$c/$p"] optimal["$c/$p"] < <(
      build/bin/kvtier simulate "$trace" --capacity-blocks "$c" --policy "$p" \
        --block-tokens "$block_tokens" --json |
        python3 -c 'import json, sys
j = json.load(sys.stdin)
print(j["block_hit_ratio"], j["saved_prefill_ratio"], str(j.get("optimal", "-")).lower())')
  done
done

table() {  # title, name of the associative array holding the figures
  local -n figures=$2
  local header="| capacity (blocks) |" rule="|---:|"
  for t in "${titles[@]}"; do header+=" $t |"; rule+="---:|"; done
  for t in "${titles[@]:1}"; do header+=" $t / LRU |"; rule+="---:|"; done
  echo "$1"
  echo
  echo "$header"
  echo "$rule"
  for c in "${capacities[@]}"; do
    local row="| $c |" lru=${figures[$c/lru]}
    for p in "${policies[@]}"; do row+=$(awk -v v="${figures[$c/$p]}" 'BEGIN { printf " %.2f%% |", 100*v }'); done
    for p in "${policies[@]:1}"; do
      row+=$(awk -v v="${figures[$c/$p]}" -v l="$lru" 'BEGIN { printf " %.3f |", (l > 0 ? v/l : 0) }')
    done
    echo "$row"
  done
  echo
}

capacities=("$@")
table "Block hit ratio" block
table "Saved prefill cost (share of the trace's prefill cost)" prefill
exact=yes
for c in "${capacities[@]}"; do [ "${optimal[$c/belady]}" = true ] || exact=no; done
echo "Belady's schedule proven optimal for block hits at every capacity: $exact"
