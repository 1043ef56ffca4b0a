# Sourced by the bench scripts that start their own kvtierd (spill_bench.sh, replay_bench.sh).
#   bench_tmpdir NAME        makes $tmp under $KVTIER_NVME_BENCH_DIR, else $TMPDIR, else /tmp (point
#                            it at the NVMe device to measure), removed on exit with the daemon
#                            stopped; on failure the end of $tmp/kvtierd.log is shown
#   start_kvtierd SOCK ARGS  starts $bin/kvtierd on the Unix socket SOCK (no TCP, no HTTP, no GPU
#                            tier) with ARGS, its log in $tmp/kvtierd.log, and waits until it answers
#   stop_kvtierd             stops it (SIGTERM) and waits for it
#   bench_quick ARGS         succeeds when ARGS (the script's own) hold --quick
#   fio_write_kibps MIB      fio's sequential O_DIRECT write of MIB MiB in 2 MiB blocks at queue
#                            depth 16 (io_uring) into $tmp, in KiB/s: the disk's write baseline
#   fio_randread_kibps MIB BS DEPTH
#                            fio's random O_DIRECT reads of BS blocks at queue depth DEPTH
#                            (io_uring) over a file of MIB MiB in $tmp for 5 s, in KiB/s
pid=""

bench_quick() {
  local arg
  for arg in "$@"; do
    [ "$arg" = --quick ] && return 0
  done
  return 1
}

stop_kvtierd() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  pid=""
}

bench_cleanup() {
  local rc=$?
  stop_kvtierd
  [ "$rc" -ne 0 ] && [ -f "$tmp/kvtierd.log" ] && tail -n 20 "$tmp/kvtierd.log" >&2
  rm -rf "$tmp"
  exit "$rc"
}

bench_tmpdir() {
  local base="${KVTIER_NVME_BENCH_DIR:-${TMPDIR:-/tmp}}"
  tmp="$(mktemp -d "$base/kvtier-$1.XXXXXX")"
  trap bench_cleanup EXIT
}

start_kvtierd() {
  local sock=$1
  shift
  "$bin/kvtierd" --unix "$sock" --port 0 --http-port 0 --gpu-bytes 0 --log-level warn "$@" \
    >"$tmp/kvtierd.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do
    "$bin/kvtier" ping --url "unix://$sock" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "kvtierd did not answer on $sock" >&2
  return 1
}

fio_randread_kibps() {
  fio --name=kvtier-read --filename="$tmp/fio.data" --size="$1M" --bs="$2" --iodepth="$3" \
      --ioengine=io_uring --direct=1 --rw=randread --runtime=5 --time_based \
      --output-format=json |
    python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['read']['bw'])"
  rm -f "$tmp/fio.data"
}

fio_write_kibps() {
  fio --name=kvtier-write --filename="$tmp/fio.data" --size="$1M" --bs=2M --iodepth=16 \
      --ioengine=io_uring --direct=1 --rw=write --output-format=json |
    python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['write']['bw'])"
  rm -f "$tmp/fio.data"
}
