#!/usr/bin/env bash
# The main job: install what is missing, build, start kvtierd on its embedded defaults, drive it
# with a real conversation trace, and show the hits and the tier usage an operator would see.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Only what the demo runs: the daemon and the CLI (scripts/test.sh builds the rest).
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target kvtierd kvtier
trace=tests/data/mooncake_conversation_trace.jsonl
bin=build/bin

echo
echo "== kvtierd, embedded defaults (Unix socket, TCP 6380 and HTTP 9480 on loopback) =="
log=$(mktemp)
$bin/kvtierd >"$log" 2>&1 &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null || true; wait $daemon 2>/dev/null || true; rm -f "$log"' EXIT
# Locking a large arena in RAM can take a few seconds: wait up to two minutes for the socket.
ready=0
for _ in $(seq 1200); do
  if $bin/kvtier ping >/dev/null 2>&1; then ready=1; break; fi
  kill -0 $daemon 2>/dev/null || break
  sleep 0.1
done
cat "$log"
if [ $ready -ne 1 ]; then
  echo "demo: kvtierd did not become ready; its log is above" >&2
  exit 1
fi

echo
echo "== kvtier replay: the first 2,000 requests of the Mooncake conversation trace =="
echo "   (each 512-token block stored as 256 KiB; every block read back is verified)"
$bin/kvtier replay "$trace" --block-bytes 256KiB --limit 2000

echo
echo "== kvtier stats =="
$bin/kvtier stats

echo
echo "== what Prometheus scrapes (http://127.0.0.1:9480/metrics, dashboard at /) =="
if command -v curl >/dev/null; then
  curl -s http://127.0.0.1:9480/metrics | grep -E '^kvtier_(tier_used_bytes|tier_blocks|hit_blocks_total|lookup_blocks_total)' || true
fi

echo
echo "== redis-cli speaks to it too =="
redis-cli -p 6380 SET greeting "hello from kvtier"
redis-cli -p 6380 GET greeting

echo
echo "== kvtier simulate: block hit ratio against cache size, offline, with the daemon's own eviction"
echo "   policies (sticky is the default) and the offline optimum (belady) =="
printf '%-17s %8s %8s %8s %8s\n' "capacity (blocks)" lru arc sticky belady
for capacity in 2000 10000 50000; do
  row=$(printf '%-17s' "$capacity")
  for policy in lru arc sticky belady; do
    ratio=$($bin/kvtier simulate "$trace" --capacity-blocks "$capacity" --policy "$policy" --json |
      python3 -c 'import json, sys; print("%.2f%%" % (100 * json.load(sys.stdin)["block_hit_ratio"]))')
    row+=$(printf ' %8s' "$ratio")
  done
  echo "$row"
done
echo "(docs/simulate.md: the same on the full traces, and what each policy does)"
