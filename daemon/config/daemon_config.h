// DaemonConfig: every setting of kvtierd, its embedded defaults, and how a YAML file and
// command-line flags override them.
//
// Precedence: embedded defaults < config file (--config FILE) < flags. Everything is validated
// once, here, at start-up; an error names the bad key ("tiers.host_bytes: size '12 furlongs' has
// unknown suffix ...") so an operator can fix it without reading code. Unknown keys in the file are
// errors too: a typo must not silently fall back to a default.
//
// Pure data plus parsing; no threads.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "daemon/index/eviction_policy.h"

namespace kvtier::config {

// The network threads kvtierd runs when server.io_threads is 0: half the cores, at least one,
// at most eight. The daemon shares its node with the inference engine and the clients it serves;
// its threads mostly wait on the kernel's socket copies, and a thread per core would compete with
// the very processes it serves (bench/daemon_bench.sh's TCP figures show it on a small machine:
// compare runs with KVTIERD_ARGS="--io-threads N").
uint32_t DefaultIoThreads(unsigned hardware_threads);

// The most wire bytes of one command (all its arguments and their framing) when max_bulk_bytes
// is at most its default: Redis' client-query-buffer-limit, which bounds an MSET of many values
// as a whole.
inline constexpr uint64_t kDefaultMaxCommandBytes = 1ull << 30;

struct DaemonConfig {
  // listen
  std::string unix_path;  // default: DefaultSocketPath(); "" turns the socket off
  uint32_t unix_mode = 0660;
  std::vector<uid_t> allowed_uids;  // empty: any local user that can open the socket
  std::string tcp_host = "127.0.0.1";
  uint16_t tcp_port = 6380;  // 0 turns TCP off
  std::string http_host = "127.0.0.1";
  uint16_t http_port = 9480;  // 0 turns HTTP (metrics, stats, dashboard) off
  // Required for a non-loopback tcp_host. From --password, else $KVTIER_PASSWORD (kPasswordEnv)
  // when set and not empty, else listen.password: the flag is visible to every user of the node.
  std::string password;

  // tiers
  uint64_t host_bytes = 0;  // 0 in the file or flags means "auto": sized from RAM
  uint64_t slab_bytes = 0;  // 0 in the file or flags means "auto": AutoSlabBytes(host_bytes)
  bool huge_pages = true;
  bool mlock = true;
  std::string data_dir;  // default: DefaultDataDir()

  // nvme tier (files under <data_dir>/nvme unless nvme_paths names files or devices)
  static constexpr uint64_t kAutoBytes = UINT64_MAX;
  uint64_t nvme_bytes = kAutoBytes;  // 0 turns the tier off; auto: see AutoNvmeBytes
  // Set by Finalize when nvme_bytes was auto: the figure is today's default, and a tier already
  // formatted keeps its own size (and its blocks) rather than being reformatted to it.
  bool nvme_bytes_auto = false;
  // Set by Finalize when nvme_bytes was auto: how it was resolved, for the log and for the note
  // that says why there is no NVMe tier ("nvme.bytes auto: 0, ...").
  std::string nvme_bytes_note;
  std::vector<std::string> nvme_paths;
  std::string nvme_io_backend = "auto";  // auto, io_uring, threads
  uint64_t nvme_queue_depth = 32;
  uint64_t nvme_rings = 4;
  bool nvme_direct_io = true;
  bool nvme_promote_on_hit = true;
  std::string nvme_admission = "all";     // all, reused
  bool nvme_write_through = false;        // puts go to NVMe too before they are acknowledged
  // How much of the write-through copies a power cut may lose; 0: sync every write.
  uint64_t nvme_sync_interval_ms = 1000;
  // How much of the other blocks on NVMe (cold cache) a power cut may lose; 0: synced only with
  // write-through copies and at a clean stop (tiers/nvme/sync_schedule.h).
  uint64_t nvme_cache_sync_interval_ms = 60'000;
  bool cold_start = false;                // discard the NVMe tier's contents at start

  // gpu tier: a pool of device memory above the host tier. Puts land in host; blocks read often
  // (gpu_promotion) are copied up by the GPU mover, and demoted back to host under pressure.
  // Off unless asked for: the engine next to kvtierd sizes its own use of the device (vLLM takes
  // gpu_memory_utilization of it, 0.9 by default) and would not find memory a default tier took.
  uint64_t gpu_bytes = 0;               // 0: no GPU tier; auto: kAutoGpuBytesMeaning
  uint32_t gpu_device = 0;              // CUDA device ordinal
  bool gpu_fake = false;                // a host-memory stand-in (tests, demos); needs gpu_bytes
  uint32_t gpu_copy_lanes = 4;          // copies to and from the device that may run at once
  std::string gpu_promotion = "reads";  // reads, off (placement/gpu_promotion_policy.h)
  uint32_t gpu_promote_after_reads = 2;
  uint64_t gpu_promote_window_ms = 600'000;
  // At shutdown, how long the GPU pool waits for the clients that map it to let go before it is
  // freed (server/gpu_importers.h).
  uint64_t gpu_detach_timeout_ms = 10'000;

  // placement: the background mover keeps the host tier between these fractions of its size
  double high_watermark = 0.95;
  double low_watermark = 0.90;
  // Threads of the tier mover: NVMe moves in flight at once.
  uint32_t mover_threads = 4;
  // Bytes of demotion writes the mover keeps in flight, over all its threads (at least one block
  // each): enough for the disk's write bandwidth; reads wait behind deeper queues.
  uint64_t write_depth_bytes = 2 << 20;
  // When puts arrive faster than the mover writes host blocks to NVMe: "wait" for it (puts run at
  // the disk's pace, and every block reaches NVMe), or "drop" the coldest host blocks it has not
  // reached (puts run at memory speed; the cache keeps what the disk could take).
  std::string when_disk_lags = "wait";
  // The share of the NVMe tier that copies of blocks read up from NVMe may hold, so that evicting
  // such a block again writes nothing (StoreOptions::nvme_copy_share). 0: no copy is kept.
  double nvme_copy_share = 0.125;
  // The mover threads' CPU priority: "low" (nice 19, as RocksDB runs its background threads) lets
  // the engine and kvtierd's network threads have the CPU first; "normal" keeps kvtierd's own.
  std::string mover_cpu_priority = "low";

  // shutdown: at SIGTERM/SIGINT/SIGHUP the blocks of the memory tiers are written to NVMe (newest
  // first) so that a restart serves them; flush_seconds bounds how long that may take (0: until
  // NVMe is full of them). A SIGTERM/SIGINT sent while the flush runs cuts it short
  // (daemon/kvtierd/main.cc: FlushMemoryToNvme).
  bool shutdown_flush = true;
  uint64_t shutdown_flush_seconds = 0;

  // store
  std::string eviction_policy{index::kDefaultEvictionPolicy};
  // Per tier, a policy other than eviction_policy; empty: eviction_policy. The NVMe tier, large
  // and fed by the host tier's victims, may want another order than the memory tiers.
  std::string gpu_eviction_policy;
  std::string host_eviction_policy;
  std::string nvme_eviction_policy;
  uint64_t lease_timeout_ms = 30'000;
  uint64_t reservation_timeout_ms = 30'000;

  // limits
  uint64_t max_bulk_bytes = 512ull << 20;
  // Not a key: the most wire bytes of one command, set by Finalize from max_bulk_bytes (see
  // MaxCommandBytes).
  uint64_t max_command_bytes = kDefaultMaxCommandBytes;
  uint64_t max_array_len = 1u << 20;
  uint64_t max_inline_bytes = 64u << 10;
  uint64_t max_key_bytes = 64u << 10;
  uint64_t max_generic_name_bytes = 256ull << 20;  // generic key names kept in daemon memory
  uint64_t max_lookup_keys = 65'536;
  uint64_t max_keys_reply = 100'000;  // KEYS refuses a larger key space (use SCAN)
  uint64_t max_inflight_bytes_per_client = 1ull << 30;
  uint64_t idle_timeout_ms = 0;
  uint64_t reader_wait_ms = 5'000;  // below the client's default timeout (ServerOptions)
  uint64_t mover_wait_ms = 2'000;  // puts and reads waiting for the background mover
  uint64_t max_clients = 10'000;
  uint64_t max_leases = 1u << 20;        // open read leases, all clients together
  uint64_t max_reservations = 1u << 20;  // puts in flight, all clients together
  // Departures KVT.EXPLAIN remembers (daemon/store/departure_log.h): 64 bytes each.
  uint64_t departure_log_entries = 65'536;

  // metrics: latency histograms of lookups, gets and puts (per op, path and tier) and of moves
  // between tiers in /metrics, /stats and INFO. false saves their clock reads and counter
  // updates (bench/README.md: metrics_overhead_ratio); the moved bytes are still counted.
  bool latency_histograms = true;
  // metrics.history: a sample of the statistics every history_interval_ms, the last
  // history_samples of them kept in memory for /stats/history and the dashboard (the defaults:
  // 10 s for 6 hours, about 1.2 MiB; daemon/metrics/stats_history.h). false takes no samples.
  bool history = true;
  uint64_t history_interval_ms = 10'000;
  uint64_t history_samples = 2'160;
  // remote tier (docs/scale-out.md): a Redis Cluster, or a single Redis/Valkey server, shared by
  // every kvtierd of a fleet. Blocks dropped from the last local tier are published there by the
  // tier mover; lookups and reads of this node find what other nodes published.
  std::string remote_url;       // "" (the default): no remote tier. redis://[user@]host:port[,...]
  std::string remote_user;      // the ACL user; "" takes the URL's (or the server's default)
  std::string remote_password;  // the config file or KVTIER_REMOTE_PASSWORD; never a flag
  uint64_t remote_ttl_seconds = 86'400;    // SET ... PX: the cluster forgets a block after this
  uint64_t remote_lookup_timeout_ms = 20;  // how long a KVT.LOOKUP waits for the cluster
  uint64_t remote_timeout_ms = 1'000;      // one publish or fetch batch of the mover
  uint64_t remote_connect_timeout_ms = 1'000;
  bool remote_write_through = false;  // publish on first put too (best effort, not awaited)
  // Lookups ask a replica first: a block found there survives its master's failover, but a
  // block the replica has not received yet is a miss.
  bool remote_lookups_on_replicas = false;
  // TLS, for a rediss:// URL (tiers/remote/tls_context.h): the CA the nodes' certificates must
  // chain to ("" : the system's), a client certificate and key for servers that ask for one, and
  // the name the certificates must carry ("": each node's host).
  std::string remote_tls_ca_file;
  std::string remote_tls_cert_file;
  std::string remote_tls_key_file;
  std::string remote_tls_server_name;

  // quotas: byte quotas per tier, for a tenant (every namespace registered with its salt) or
  // for one namespace (its id, 32 hex digits). A tenant within its quota in a tier is not evicted
  // there by another's puts; over it, its own blocks go first (daemon/store/quota_table.h).
  // KVT.QUOTA changes them at run time.
  struct Quota {
    bool is_namespace = false;
    std::string subject;  // the tenant salt, or the namespace id in hex
    TierId tier = TierId::kHost;
    uint64_t bytes = 0;
  };
  std::vector<Quota> quotas;

  // server
  uint32_t io_threads = 0;         // 0: DefaultIoThreads
  std::string log_level = "info";  // trace, debug, info, warn, error, off
};

// The host tier size "auto" resolves to: a quarter of the memory available to this process,
// capped at 64 GiB and at least 64 MiB. Available is the machine's available memory (MemAvailable:
// free pages and the page cache it may drop, such as model weights just read) or, inside a
// memory cgroup (a container, a systemd unit with MemoryMax), the room left below its limit,
// whichever is less: a pod's daemon must not size itself from the node.
uint64_t AutoHostBytes();
// The memory a host arena may take, in bytes: `total` the machine's (MemTotal) or its cgroup's
// limit, whichever is less; `available` that available memory, or with `with_huge_pages`
// (tiers.huge_pages) the huge-page pool's free unreserved pages where they are more (MemAvailable
// leaves them out; an arena is all huge pages or none).
struct HostMemory {
  uint64_t total = 0;
  uint64_t available = 0;
};
HostMemory HostMemoryNow(bool with_huge_pages);
// The slab size "auto" resolves to for a host tier of `host_bytes`: 64 MiB (one 512-token block of
// Llama 3.1 8B), halved until the tier holds at least kAutoSlabsPerTier slabs, down to 1 MiB.
// Every block size in use takes slabs of its own, and a tier of a few slabs gives a whole size's
// blocks up whenever another size needs a slab (a 64 MiB tier was one slab: a SET of a value of a
// new size dropped every other value). Larger blocks take runs of slabs.
inline constexpr uint64_t kAutoSlabsPerTier = 32;
uint64_t AutoSlabBytes(uint64_t host_bytes);
// The room left below the memory limits of the cgroup that `proc_self_cgroup` (the text of
// /proc/self/cgroup) names and of its ancestors, read under `cgroup_root` (/sys/fs/cgroup):
// cgroup v2's memory.max and memory.current, or v1's memory.limit_in_bytes and
// memory.usage_in_bytes, the usage less the inactive file cache of memory.stat (inactive_file,
// v1 total_inactive_file), which the kernel reclaims first (the kubelet's working set). nullopt
// when no limit is set or none can be read.
std::optional<uint64_t> CgroupMemoryRoom(const std::string& cgroup_root,
                                         const std::string& proc_self_cgroup);
// The lowest of those limits themselves; nullopt when none is set.
std::optional<uint64_t> CgroupMemoryLimit(const std::string& cgroup_root,
                                          const std::string& proc_self_cgroup);
// The MemAvailable line of `meminfo` (the text of /proc/meminfo), in bytes; nullopt without one
// (kernels before 3.14).
std::optional<uint64_t> MemAvailableBytes(const std::string& meminfo);
// (HugePages_Free - HugePages_Rsvd) x Hugepagesize of `meminfo`, in bytes; 0 without them.
uint64_t FreeHugePageBytes(const std::string& meminfo);

// The NVMe tier size "auto" resolves to, and how (`note`, for the log and the reason the tier is
// off): a tenth of the free space of the file system holding `data_dir` (or its nearest existing
// parent), capped at 16 GiB, rounded down to 1 MiB; 0 (the tier off) when that is under 64 MiB or
// the free space cannot be read. With `paths` (nvme.paths) the blocks go there, not to data_dir,
// and the tier is split equally between them: each path's file system (of its directory; a raw
// block device: the device's size) gives a tenth of its room, divided between the paths it holds,
// and the tightest of these shares times the number of paths is the size, with the same cap and
// floor. It sizes a tier that is formatted afresh: the free space moves (the tier's own files take
// some), so a tier already formatted keeps its size.
struct AutoNvmeSize {
  uint64_t bytes = 0;
  std::string note;
};
AutoNvmeSize AutoNvmeBytes(const std::string& data_dir, const std::vector<std::string>& paths = {});

// What gpu.bytes "auto" means, for --help and errors: it is resolved when the tier is created,
// from the device itself (an eighth of its memory, at most half of what is free), so here it stays
// DaemonConfig::kAutoBytes.
inline constexpr const char* kAutoGpuBytesMeaning =
    "an eighth of the device's memory, at most half of its free memory";

// The most wire bytes of one command kvtierd takes: one value of `max_bulk_bytes` with a key of
// `max_key_bytes` and the command's name, options and framing, and never less than
// kDefaultMaxCommandBytes. A fixed limit made a max_bulk_bytes above it have no effect (a larger
// SET was refused as "too big command"); this way a command above 1 GiB costs at most the memory
// one value was allowed, and an MSET is bounded as before.
uint64_t MaxCommandBytes(uint64_t max_bulk_bytes, uint64_t max_key_bytes);

// Parses flags (and the file named by --config). Returns the resolved, validated configuration.
// `help_text` receives the --help output when --help was given (the caller prints it and exits
// 0); errors are kInvalidArgument with a message naming the flag or key.
struct ParseOutcome {
  DaemonConfig config;
  bool help_requested = false;
  std::string help_text;
};
Result<ParseOutcome> ParseCommandLine(int argc, const char* const* argv);

// Applies a YAML document (the config file's text) over `config`. `source` names the file in
// errors.
Status ApplyYaml(const std::string& yaml_text, const std::string& source, DaemonConfig& config);

// The environment variable that carries the listen password (listen.password) when neither the
// config file nor --password sets one. Every user of the node can read a process's command line
// (/proc/PID/cmdline, ps), but only its own user and root its environment: the deploy files pass
// the password here, from a Kubernetes Secret or `docker run -e`.
inline constexpr const char* kPasswordEnv = "KVTIER_PASSWORD";

// The environment variable that carries remote.password (it overrides the config file's): a
// password never goes on a command line, which every user of the node can read.
inline constexpr const char* kRemotePasswordEnv = "KVTIER_REMOTE_PASSWORD";

// Validates the remote.* keys (Finalize calls it): the URL parses as a seed list without a
// password, the user is not given twice differently, the durations are positive.
// kInvalidArgument naming the key; no message repeats the password.
Status FinalizeRemote(DaemonConfig& config);

// Checks cross-field rules (a non-loopback TCP listener needs a password, sizes in range, a known
// log level and eviction policy). Fills "auto" values.
Status Finalize(DaemonConfig& config);

}  // namespace kvtier::config
