#!/usr/bin/env bash
# Builds the benchmarks (release preset) and prints one line per figure: "NAME VALUE UNIT".
# Every figure is measured against its baseline in the same run; see the header of each program
# and bench/README.md. The daemon figures come from bench/daemon_bench.sh, which starts and stops
# kvtierd and redis-server itself; the NVMe figures from bench/nvme_bench.sh, which runs fio.
# --quick: fewer repetitions and smaller sizes, for a smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >&2
cmake --preset release >/dev/null
cmake --build --preset release --target kvtier_core_bench kvtier_daemon_bench kvtier_nvme_bench kvtierd \
  >/dev/null
build/bin/kvtier_core_bench "$@"
bench/daemon_bench.sh "$@"
bench/nvme_bench.sh "$@"
