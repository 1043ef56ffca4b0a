#!/usr/bin/env bash
# Benchmarks of a live kvtierd, each against a baseline measured in the same run. Starts kvtierd
# (and, for the TCP figures, redis-server) on free loopback ports with a temporary directory,
# runs build/bin/kvtier_daemon_bench and redis-benchmark against them, prints one line per figure
# ("NAME VALUE UNIT") and stops every process it started on exit, failed runs included.
# bench/run.sh builds the binaries and calls it; bench/README.md explains each figure.
# --quick: fewer repetitions and requests, for a smoke run.
# KVTIERD_ARGS: more kvtierd flags, split on spaces (to compare settings, e.g. "--io-threads 2").
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${KVTIER_BIN_DIR:-build/bin}

quick=0
for arg in "$@"; do
  if [ "$arg" = --quick ]; then quick=1; fi
done
if [ "$quick" = 1 ]; then
  rb_requests=60 rb_reps=3
else
  rb_requests=400 rb_reps=11
fi
# The shm working set is 512 MiB (128 MiB with --quick) of 2 MiB blocks, plus 32 MiB of 4 KiB
# blocks for the lookup and a few 2 MiB generic values from redis-benchmark; each block size
# takes whole 64 MiB slabs. 1 GiB holds all of it, so the measured loops evict nothing
# (kvtier_daemon_bench checks the daemon's eviction count and warns on stderr otherwise).
host_bytes=1GiB

# Every idle connection costs a descriptor here and one in the daemon (which inherits the limit).
idle_clients=1000
need_fds=$((idle_clients + 256))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need_fds" ]; then
  ulimit -n "$need_fds" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  if [ "$(ulimit -n)" -lt "$need_fds" ]; then
    idle_clients=$(($(ulimit -n) - 256))
    echo "daemon_bench: open-file limit $(ulimit -n); measuring $idle_clients idle clients" >&2
  fi
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-bench.XXXXXX")
started=()  # pids of the servers this script started

stop() {
  local pid=$1 i
  kill "$pid" 2>/dev/null || return 0
  for i in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$? pid log
  trap '' PIPE  # a closed stdout or stderr must not stop the clean-up half way
  for pid in "${started[@]}"; do stop "$pid"; done
  if [ "$rc" -ne 0 ]; then
    for log in "$tmp"/*.log; do
      [ -f "$log" ] && { echo "--- $log" >&2; tail -n 20 "$log" >&2; }
    done
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_ready PID PING_ARGS...: waits until the server answers PING; fails if it exits first.
wait_ready() {
  local pid=$1 i
  shift
  for i in $(seq 200); do
    kill -0 "$pid" 2>/dev/null || return 1
    [ "$(redis-cli "$@" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.05
  done
  return 1
}

# start_server NAME PORT_VAR COMMAND...: starts COMMAND with "@PORT@" replaced by a free port,
# retrying on another port when it does not come up (another process may take a port between
# free_port and the bind). Sets PORT_VAR and server_pid.
start_server() {
  local name=$1 port_var=$2 try port args arg
  shift 2
  for try in 1 2 3 4 5; do
    port=$(free_port)
    args=()
    for arg in "$@"; do args+=("${arg//@PORT@/$port}"); done
    "${args[@]}" >"$tmp/$name.log" 2>&1 &
    server_pid=$!
    started+=("$server_pid")
    if wait_ready "$server_pid" -h 127.0.0.1 -p "$port"; then
      printf -v "$port_var" '%s' "$port"
      return 0
    fi
    stop "$server_pid"
  done
  echo "daemon_bench: $name did not start; see its log below" >&2
  return 1
}

# rb_rps CSV_FILE TEST: the rps column of TEST's row in redis-benchmark --csv output, found by
# the header's column name rather than its position.
rb_rps() {
  awk -F, -v test="$2" '
    { gsub(/"|\r/, "") }
    NR == 1 { for (i = 1; i <= NF; i++) if ($i == "rps") col = i; next }
    col && $1 == test { print $col; found = 1 }
    END { if (!found) exit 1 }' "$1"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# run_rb NAME PORT REP: one redis-benchmark run; appends its SET and GET rps to the NAME files.
run_rb() {
  local name=$1 port=$2 rep=$3 out="$tmp/rb-$1-$3.csv"
  if ! redis-benchmark -h 127.0.0.1 -p "$port" -d 2097152 -c 4 -n "$rb_requests" -t set,get \
      --csv >"$out" 2>"$tmp/rb-$name.log"; then
    echo "daemon_bench: redis-benchmark against $name failed" >&2
    return 1
  fi
  for test in SET GET; do
    if ! rb_rps "$out" "$test" >>"$tmp/rps-$name-$test"; then
      echo "daemon_bench: no $test rps in redis-benchmark's output:" >&2
      cat "$out" >&2
      return 1
    fi
  done
}

figure() { awk -v n="$1" -v v="$2" -v u="$3" 'BEGIN { printf "%s %.4g %s\n", n, v, u }'; }

# kvtierd: idle clients first, on a fresh daemon (a daemon that has served large requests has
# freed memory a new connection could reuse without growing), then the lookup and shm figures.
start_server kvtierd kvt_port "$bin/kvtierd" --unix "$tmp/kvtierd.sock" --port @PORT@ \
  --http-port 0 --host-bytes "$host_bytes" --data-dir "$tmp/data" --nvme-bytes 0 --gpu-bytes 0 \
  --log-level warn ${KVTIERD_ARGS:-}  # unquoted: one word per flag
kvt_pid=$server_pid
quick_flag=()
[ "$quick" = 1 ] && quick_flag=(--quick)
"$bin/kvtier_daemon_bench" --url "unix://$tmp/kvtierd.sock" --pid "$kvt_pid" \
  --idle-clients "$idle_clients" "${quick_flag[@]}"

# TCP against Redis: alternate the two servers so drift in the machine's load hits both alike.
start_server redis redis_port redis-server --port @PORT@ --bind 127.0.0.1 --save '' \
  --appendonly no --daemonize no --dir "$tmp"
# Which goes first alternates too, since a run may leave the machine warmer for the next.
for rep in $(seq "$rb_reps"); do
  if [ $((rep % 2)) = 1 ]; then
    run_rb kvtierd "$kvt_port" "$rep"
    run_rb redis "$redis_port" "$rep"
  else
    run_rb redis "$redis_port" "$rep"
    run_rb kvtierd "$kvt_port" "$rep"
  fi
done
for test in SET GET; do
  kvt=$(median <"$tmp/rps-kvtierd-$test")
  redis=$(median <"$tmp/rps-redis-$test")
  lower=$(echo "$test" | tr 'A-Z' 'a-z')
  figure "tcp_${lower}_ratio_to_redis" "$(awk -v a="$kvt" -v b="$redis" 'BEGIN { print a / b }')" ratio
  figure "tcp_${lower}_rps_kvtierd" "$kvt" rps
  figure "tcp_${lower}_rps_redis" "$redis" rps
done
