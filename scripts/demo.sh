#!/usr/bin/env bash
# The main job: install what is missing, build, and show the cache engine at work on a real
# conversation trace (hit ratios and evictions at several capacities, for each eviction policy).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
trace=tests/data/mooncake_conversation_trace.jsonl
echo
echo "== kvtier simulate: the Mooncake conversation trace through the block index =="
for capacity in 2000 10000 50000; do
  for policy in lru arc; do
    build/bin/kvtier simulate "$trace" --capacity-blocks "$capacity" --policy "$policy"
  done
done
