#!/usr/bin/env bash
# `kvtier replay` of the conversation trace (tests/data) through a kvtierd with a 256 MiB host tier,
# alone and with a 2 GiB NVMe tier below it, so that the NVMe tier's cost to a client's request rate
# is seen against the host tier alone in the same run. Prints "NAME VALUE UNIT" lines
# (bench/README.md):
#   replay_nvme_ratio_to_host_only        requests/s with NVMe (defaults: puts wait for the disk)
#                                         / requests/s host only
#   replay_nvme_drop_ratio_to_host_only   the same with placement.when_disk_lags: drop
#   replay_*_block_hit_ratio              what each configuration served
#   replay_nvme_drop_lag_drop_fraction    host victims dropped because the disk lagged (drop)
#   replay_*_nvme_get_s, replay_*_put_s   seconds the daemon's gets of NVMe blocks and its puts
#                                         took in all (its per-request statistics)
#   replay_*_nvme_written_gib             what the NVMe tier wrote to its device (demotions)
#   replay_nvme_read_gib                  what the NVMe run read from its device: the hits it
#                                         serves from NVMe, which the host-only run misses
#   replay_fio_randread_mib_per_s         fio's random 256 KiB reads at queue depth 8, same run
#   replay_nvme_ratio_bound_by_reads      the host-only run's time over that time plus those
#                                         reads at fio's speed: the most replay_nvme_ratio_to_
#                                         host_only can be with every write free (the replay
#                                         sends one request at a time, and a miss costs it
#                                         nothing)
#   replay_nvme_disk_busy_share           the seconds the NVMe run's reads and writes take at fio's
#                                         speeds (random reads, sequential writes; same run) over
#                                         that run's wall time: near 1 or above, the run went at
#                                         the pace of the disk, and only a faster disk or fewer
#                                         bytes written moves replay_nvme_ratio_to_host_only
#   replay_paced_nvme_ratio_to_host_only  the NVMe (defaults) and host-only replays again, each
#                                         request sent at its trace time over replay_paced_speed:
#                                         the pace at which the trace's puts come at half the
#                                         disk's write bandwidth (fio, same run), so what a disk
#                                         that keeps up costs a client, where the runs above
#                                         send as fast as they can and measure the disk's bandwidth
#   replay_paced_*_request_p99_ms, _max_ms  a request's time in the paced runs (the NVMe run
#                                         serves more blocks, some from the disk; a miss costs
#                                         the host-only run nothing)
# The NVMe directory is $KVTIER_NVME_BENCH_DIR, else $TMPDIR, else /tmp; removed on exit, with
# the daemon stopped. --quick: the first 500 requests instead of 2,000. KVTIER_REPLAY_WRITE_DEPTH
# sets placement.write_depth_bytes (default 2MiB, kvtierd's own), KVTIER_REPLAY_MOVER_PRIORITY
# placement.mover_cpu_priority (default low, kvtierd's own). With TMPDIR=/dev/shm the NVMe tier
# is on tmpfs: no disk waits, only the CPU the tiers cost. KVTIER_REPLAY_COPY_SHARE sets
# placement.nvme_copy_share (default kvtierd's own; 0 frees the NVMe copy of every block read up).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${KVTIER_BIN_DIR:-build/bin}
trace=tests/data/mooncake_conversation_trace.jsonl
. bench/kvtierd_lib.sh

limit=2000
# The mover's write depth (placement.write_depth_bytes); 32MiB gives the earlier 8 MiB a thread.
write_depth=${KVTIER_REPLAY_WRITE_DEPTH:-2MiB}
mover_priority=${KVTIER_REPLAY_MOVER_PRIORITY:-low}
if bench_quick "$@"; then limit=500; fi
bench_tmpdir replay-bench

# replay NAME NVME_BYTES WHEN_DISK_LAGS [SPEED]: one replay against a fresh daemon (at SPEED times
# the trace's pace; as fast as it can without); leaves NAME.json (the replay's summary) and
# NAME.stats.json (the daemon's statistics after it) in $tmp.
replay() {
  local name=$1 nvme=$2 lags=$3 speed=${4:-0}
  local sock="$tmp/$name.sock"
  printf 'placement:\n  when_disk_lags: %s\n  write_depth_bytes: %s\n  mover_cpu_priority: %s\n' \
    "$lags" "$write_depth" "$mover_priority" >"$tmp/$name.yaml"
  if [[ -n ${KVTIER_REPLAY_COPY_SHARE:-} ]]; then
    printf '  nvme_copy_share: %s\n' "$KVTIER_REPLAY_COPY_SHARE" >>"$tmp/$name.yaml"
  fi
  start_kvtierd "$sock" --config "$tmp/$name.yaml" --host-bytes 256MiB --nvme-bytes "$nvme" \
    --data-dir "$tmp/$name.data"
  "$bin/kvtier" replay "$trace" --url "unix://$sock" --block-bytes 256KiB --limit "$limit" \
    --speed "$speed" --json 2>/dev/null >"$tmp/$name.json"
  "$bin/kvtier" stats --url "unix://$sock" --json >"$tmp/$name.stats.json"
  stop_kvtierd
  rm -rf "$tmp/$name.data"
}

replay host_only 0 wait
replay nvme 2GiB wait
replay nvme_drop 2GiB drop
# The paced pair: the speed at which the puts of the host-only run (its stored blocks over the
# trace's span) come at half of fio's write bandwidth.
fio_kibps=$(fio_write_kibps 1024)
read_kibps=$(fio_randread_kibps 1024 256k 8)
speed=$(python3 - "$tmp/host_only.json" "$trace" "$limit" "$fio_kibps" <<'PY'
import json, sys
summary, trace, limit, fio_kibps = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
with open(trace) as lines:
    stamps = [json.loads(line)["timestamp"] for _, line in zip(range(limit), lines)]
done = json.load(open(summary))
put_bytes_per_trace_s = done["stored_blocks"] * done["block_bytes"] / ((stamps[-1] - stamps[0]) / 1000)
print(f"{0.5 * fio_kibps * 1024 / put_bytes_per_trace_s:.3f}")
PY
)
replay host_only_paced 0 wait "$speed"
replay nvme_paced 2GiB wait "$speed"

python3 - "$tmp" "$speed" "$fio_kibps" "$read_kibps" <<'PY'
import json, sys, os
tmp, speed, fio_kibps, read_kibps = (sys.argv[1], float(sys.argv[2]), float(sys.argv[3]),
                                     float(sys.argv[4]))
runs = {}
for name in ("host_only", "nvme", "nvme_drop", "host_only_paced", "nvme_paced"):
    summary = json.load(open(os.path.join(tmp, name + ".json")))
    stats = json.load(open(os.path.join(tmp, name + ".stats.json")))
    bad = summary["lost_blocks"] + summary["corrupt_blocks"] + summary["failed_puts"]
    if bad:
        sys.stderr.write(f"replay_bench: {name}: {summary['lost_blocks']} lost, "
                         f"{summary['corrupt_blocks']} corrupt, {summary['failed_puts']} failed puts\n")
    runs[name] = (summary, stats)
    if name.endswith("_paced"):
        continue
    print(f"replay_{name}_requests_per_s {summary['requests_per_s']:.4g} req/s")
    print(f"replay_{name}_block_hit_ratio {summary['block_hit_ratio']:.4g} ratio")
    if name != "host_only":
        took = lambda op, tier=None: sum(r["sum_us"] for r in stats["requests"]
                                         if r["op"] == op and tier in (None, r["tier"])) / 1e6
        print(f"replay_{name}_nvme_get_s {took('get', 'nvme'):.3g} s")
        print(f"replay_{name}_put_s {took('put'):.3g} s")
        nvme = next(t for t in stats["tiers"] if t["tier"] == "nvme")
        print(f"replay_{name}_nvme_written_gib {nvme['device']['device_bytes_written'] / 2**30:.4g} GiB")
host_rate = runs["host_only"][0]["requests_per_s"]
for name in ("nvme", "nvme_drop"):
    print(f"replay_{name}_ratio_to_host_only {runs[name][0]['requests_per_s'] / host_rate:.4g} ratio")
nvme_read = next(t for t in runs["nvme"][1]["tiers"] if t["tier"] == "nvme")["device"]["bytes_read"]
host_only_s = runs["host_only"][0]["wall_s"]
read_s = nvme_read / (read_kibps * 1024)
print(f"replay_nvme_read_gib {nvme_read / 2**30:.4g} GiB")
print(f"replay_fio_randread_mib_per_s {read_kibps / 1024:.4g} MiB/s")
print(f"replay_nvme_ratio_bound_by_reads {host_only_s / (host_only_s + read_s):.4g} ratio")
nvme_written = next(t for t in runs["nvme"][1]["tiers"] if t["tier"] == "nvme")["device"]["device_bytes_written"]
write_s = nvme_written / (fio_kibps * 1024)
print(f"replay_nvme_disk_busy_share {(read_s + write_s) / runs['nvme'][0]['wall_s']:.4g} ratio")
host = next(t for t in runs["nvme_drop"][1]["tiers"] if t["tier"] == "host")
left = host["demotions"] + host["lag_drops"]
print(f"replay_nvme_drop_lag_drop_fraction {host['lag_drops'] / left if left else 0:.4g} ratio")
paced = {name: runs[name + "_paced"][0] for name in ("host_only", "nvme")}
print(f"replay_paced_speed {speed:.4g} x")
print(f"replay_paced_put_mib_per_s {fio_kibps / 2048:.4g} MiB/s")
for name, summary in paced.items():
    print(f"replay_paced_{name}_requests_per_s {summary['requests_per_s']:.4g} req/s")
    print(f"replay_paced_{name}_block_hit_ratio {summary['block_hit_ratio']:.4g} ratio")
    latency = summary["latency_us"]["request"]
    print(f"replay_paced_{name}_request_p99_ms {latency['p99'] / 1000:.4g} ms")
    print(f"replay_paced_{name}_request_max_ms {latency['max'] / 1000:.4g} ms")
print(f"replay_paced_nvme_ratio_to_host_only "
      f"{paced['nvme']['requests_per_s'] / paced['host_only']['requests_per_s']:.4g} ratio")
PY
