// kvtierd: the kvtier daemon. Wires configuration, tiers, the store, the RESP server and the HTTP
// endpoint together, then waits for SIGINT, SIGTERM or SIGHUP.
//
// Every listen address is bound once and let go before anything else (ProbeListeners), so that
// a start that cannot listen fails before the data directory is locked or written.
//
// Start-up order: config -> data directory lock -> tiers (host, GPU, NVMe: which finds the blocks
// of the previous run) -> store (adopting those blocks) -> RESP server -> HTTP -> housekeeping
// threads (deadlines, NVMe sync, the statistics' history). The tier mover (daemon/mover/) starts
// with the store, before the server, since requests ask it for room and for blocks from their first
// command. Shutdown runs in reverse: HTTP stops answering, clients that map the GPU pool are told
// to let go and waited for (at most gpu.detach_timeout_ms, server/gpu_importers.h), the RESP server
// stops accepting and closes every connection (releasing its leases and aborting its reservations),
// the background adoption of the previous run's blocks stops, the housekeeping threads and the
// mover stop, the blocks held in memory are written to NVMe (shutdown.flush; only a SIGINT or
// SIGTERM sent once it runs cuts it short), the NVMe tier is synced, then the store and the tiers
// are destroyed. Nothing is detached; every thread is joined before main returns.
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stop_token>
#include <thread>

#include "common/fd_limit.h"
#include "common/paths.h"
#include "common/units.h"
#include "common/version.h"
#include "daemon/config/daemon_config.h"
#include "daemon/http/http_server.h"
#include "daemon/kvtierd/daemon_tiers.h"
#include "daemon/kvtierd/periodic_thread.h"
#include "daemon/metrics/stats_format.h"
#include "daemon/metrics/stats_history.h"
#include "daemon/mover/tier_mover.h"
#include "daemon/server/listen_probe.h"
#include "daemon/server/server.h"
#include "daemon/store/store.h"
#include "tiers/nvme/sync_schedule.h"

namespace kvtier {
namespace {

// Holds an exclusive flock on <data_dir>/LOCK so two daemons never share one data directory.
class DataDirLock {
 public:
  static Result<std::unique_ptr<DataDirLock>> Acquire(const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return ErrnoStatus(ec.value(), "tiers.data_dir: create " + dir);
    const std::string path = dir + "/LOCK";
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(errno, "tiers.data_dir: open " + path);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      return Busy("tiers.data_dir: " + dir + " is in use by another kvtierd");
    }
    return std::unique_ptr<DataDirLock>(new DataDirLock(fd));
  }
  ~DataDirLock() { close(fd_); }

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}
  int fd_;
};

Status EnsureSocketDir(const std::string& unix_path) {
  if (unix_path.empty()) return Status::Ok();
  std::filesystem::path dir = std::filesystem::path(unix_path).parent_path();
  if (dir.empty()) return Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "listen.unix: create " + dir.string());
  return Status::Ok();
}

// Binds and lets go of every address kvtierd listens on (daemon/server/listen_probe.h); errors
// name the key to change.
Status ProbeListeners(const config::DaemonConfig& c) {
  auto named = [](const char* key, Status st) {
    return st.ok() ? st : Status(st.code(), std::string(key) + ": " + st.message());
  };
  KVTIER_RETURN_IF_ERROR(named("listen.port", server::ProbeTcpListener(c.tcp_host, c.tcp_port)));
  KVTIER_RETURN_IF_ERROR(
      named("listen.http_port", server::ProbeTcpListener(c.http_host, c.http_port)));
  if (c.unix_path.empty()) return Status::Ok();
  return named("listen.unix", server::ProbeUnixListener(c.unix_path, c.unix_mode));
}

server::ServerOptions ServerOptionsFrom(const config::DaemonConfig& c) {
  server::ServerOptions o;
  o.unix_path = c.unix_path;
  o.unix_mode = c.unix_mode;
  o.allowed_uids = c.allowed_uids;
  o.tcp_host = c.tcp_host;
  o.tcp_port = c.tcp_port;
  o.password = c.password;
  o.io_threads = static_cast<int>(c.io_threads);
  o.max_bulk_bytes = c.max_bulk_bytes;
  o.max_command_bytes = c.max_command_bytes;
  o.max_array_len = c.max_array_len;
  o.max_inline_bytes = c.max_inline_bytes;
  o.max_key_bytes = c.max_key_bytes;
  o.max_generic_name_bytes = c.max_generic_name_bytes;
  o.max_keys_reply = c.max_keys_reply;
  o.max_lookup_keys = c.max_lookup_keys;
  o.max_inflight_bytes_per_client = c.max_inflight_bytes_per_client;
  o.idle_timeout_ms = c.idle_timeout_ms;
  o.reader_wait_ms = c.reader_wait_ms;
  o.payload_send_timeout_ms = std::max<uint64_t>(1, c.lease_timeout_ms / 2);
  o.mover_wait_ms = c.mover_wait_ms;
  o.max_clients = c.max_clients;
  o.latency_histograms = c.latency_histograms;
  return o;
}

// The tier mover's settings (daemon/mover/tier_mover.h): with an NVMe or a remote tier below host
// it demotes (or publishes) ahead of demand and does every move that waits for the disk or the
// network; with a GPU tier it copies promotion candidates up.
mover::TierMover::Options MoverOptionsFrom(const config::DaemonConfig& c, bool below_host,
                                           bool gpu) {
  mover::TierMover::Options o;
  o.threads = below_host ? c.mover_threads : 1;
  o.write_depth_bytes = c.write_depth_bytes;
  o.low_cpu_priority = c.mover_cpu_priority == "low";
  o.high_watermark = c.high_watermark;
  o.low_watermark = c.low_watermark;
  o.gpu_promotion = gpu && c.gpu_promotion != "off";
  return o;
}

// The HTTP endpoint (daemon/http/http_server.h) over the store's and the server's statistics;
// `history` is null with metrics.history off. Its failed accepts count with the RESP listeners'.
Result<std::unique_ptr<http::HttpServer>> StartHttp(const config::DaemonConfig& c,
                                                    const store::Store& store,
                                                    const server::Server& server,
                                                    const metrics::StatsHistory* history,
                                                    const std::atomic<bool>& serving) {
  auto http_failed_accepts = std::make_shared<std::atomic<uint64_t>>(0);
  auto process = [sv = &server, http_failed_accepts] {
    metrics::ProcessInfo p = sv->ProcessInfo();
    p.failed_accepts += http_failed_accepts->load();
    return p;
  };
  return http::HttpServer::Start(
      c.http_host, c.http_port,
      {.metrics = [st = &store,
                   process] { return metrics::StatsToPrometheus(st->Stats(), process()); },
       .stats = [st = &store, process] { return metrics::StatsToJson(st->Stats(), process()); },
       .history =
           [history] {
             return history ? history->ToJson() : metrics::StatsHistory::DisabledJson();
           },
       .serving = [&serving] { return serving.load(std::memory_order_acquire); },
       .failed_accepts = http_failed_accepts});
}

// SIGHUP too: a kvtierd in the foreground of a terminal that closes stops cleanly (its memory
// flushed to NVMe) instead of dying. One started under nohup ignores SIGHUP, and an ignored
// signal is discarded before sigwait could see it.
sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  return signals;
}

// Takes the stop signals that are pending (they came during the shutdown steps before the flush:
// draining GPU clients, stopping the server), so that only one sent once the flush runs cuts it
// short. Each is logged: an operator who sent it to hurry the flush sends it again.
void DrainStopSignals() {
  const sigset_t signals = StopSignals();
  const timespec now{0, 0};
  for (int signal_number; (signal_number = sigtimedwait(&signals, nullptr, &now)) > 0;) {
    spdlog::info("{} before the flush to NVMe began: it does not cut the flush short",
                 strsignal(signal_number));
  }
}

// The thread that waits, while the flush runs, for the SIGINT or SIGTERM that cuts it short (an
// operator who cannot wait). SIGHUP never does: a terminal that closes may send it twice (the
// shell's hangup to its jobs and the kernel's to the foreground group), and the first already
// started the stop. The flush wakes the thread with a signal of its own when it ends first.
std::thread WatchForCutShort(std::stop_source& cancel, const std::atomic<bool>& flushing) {
  return std::thread([&cancel, &flushing] {
    pthread_setname_np(pthread_self(), "kvtier-sigwait");
    const sigset_t signals = StopSignals();
    for (;;) {
      int signal_number = 0;
      sigwait(&signals, &signal_number);
      if (!flushing.load()) return;
      if (signal_number == SIGHUP) {
        spdlog::info("Hangup during the flush to NVMe: ignored (SIGINT or SIGTERM cuts it short)");
        continue;
      }
      spdlog::warn("{}: cutting the flush to NVMe short", strsignal(signal_number));
      cancel.request_stop();
      return;
    }
  });
}

// At a clean stop, with an NVMe tier: writes the blocks held in memory into NVMe
// (Store::FlushToNvme) so that the restart serves them. A SIGINT/SIGTERM sent while it runs cuts
// it short (WatchForCutShort); one sent before it began does not (DrainStopSignals).
void FlushMemoryToNvme(store::Store& store, const config::DaemonConfig& c) {
  if (!c.shutdown_flush) {
    spdlog::info("shutdown.flush is off: the blocks held in memory are not kept");
    return;
  }
  DrainStopSignals();
  std::stop_source cancel;
  std::atomic<bool> flushing{true};
  std::thread waiter = WatchForCutShort(cancel, flushing);
  const auto started = std::chrono::steady_clock::now();
  const uint64_t deadline_us =
      c.shutdown_flush_seconds == 0
          ? 0
          : SteadyClock::Instance().NowMicros() + c.shutdown_flush_seconds * 1'000'000;
  const store::Store::FlushResult r = store.FlushToNvme(deadline_us, cancel.get_token());
  flushing = false;
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("flushed {} blocks ({}) to NVMe in {:.1f} s; {} had their copy there already",
               r.written, FormatBytes(r.written_bytes), seconds, r.already_durable);
  if (r.left > 0) {
    spdlog::warn("{} blocks held in memory are not kept: {}", r.left,
                 r.nvme_full               ? "NVMe is full of newer blocks"
                 : cancel.stop_requested() ? "the flush was cut short"
                                           : "shutdown.flush_seconds ran out, or a device error");
  }
}

int Run(const config::DaemonConfig& c) {
  spdlog::set_level(spdlog::level::from_str(c.log_level));
  // Operators tail the log through pipes and journald: every line goes out as it is written.
  spdlog::flush_on(spdlog::level::trace);
  if (Result<uint64_t> fds = RaiseOpenFileLimit(); !fds.ok())
    spdlog::warn("{}", fds.status().ToString());

  if (InTmpFallbackDir(c.unix_path) || InTmpFallbackDir(c.data_dir)) {
    if (Status st = PrepareTmpFallbackDir(); !st.ok()) {
      spdlog::error("{}", st.ToString());
      return 1;
    }
  }
  if (Status st = EnsureSocketDir(c.unix_path); !st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  // Before the data directory is touched (the NVMe tier preallocates its file): a start that
  // cannot listen leaves nothing behind.
  if (Status st = ProbeListeners(c); !st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  auto lock = DataDirLock::Acquire(c.data_dir);
  if (!lock.ok()) {
    spdlog::error("{}", lock.status().ToString());
    return 1;
  }
  auto opened = daemon::OpenTiers(c);
  if (!opened.ok()) {
    spdlog::error("{}", opened.status().ToString());
    return 1;
  }
  daemon::DaemonTiers& tiers = *opened;
  auto store = store::Store::Create(daemon::StoreOptionsFrom(c, tiers.remote.get()), tiers.chain(),
                                    SteadyClock::Instance());
  if (!store.ok()) {
    spdlog::error("store: {}", store.status().ToString());
    return 1;
  }
  // On every way out, the remote tier's client ends before the store: its destructor ends the
  // calls in flight, whose callbacks reach into the store.
  struct RemoteEndsFirst {
    decltype(daemon::DaemonTiers::remote)& remote;
    ~RemoteEndsFirst() { remote.reset(); }
  } remote_ends_first{tiers.remote};
  if (Status st = daemon::ApplyQuotas(c, **store); !st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  // Before the server: requests wake the mover from their first command on.
  std::unique_ptr<mover::TierMover> mover;
  const bool below_host = (*store)->HostHasTierBelow();  // NVMe, or the remote tier
  const mover::TierMover::Options mover_options =
      MoverOptionsFrom(c, below_host, tiers.gpu != nullptr);
  if (below_host || mover_options.gpu_promotion) {
    mover = std::make_unique<mover::TierMover>(**store, mover_options);
    (*store)->SetMoverWakeup([m = mover.get()] { m->Wake(); });
  }

  server::ServerOptions server_options = ServerOptionsFrom(c);
  server_options.gpu_tier_note = tiers.gpu_note;
  server_options.nvme_tier_note = tiers.nvme_note;
  // The host arena and the GPU tier are shared with clients that ask (KVT.ATTACH,
  // KVT.GPUATTACH); they then lease and reserve their blocks through shared memory.
  auto server = server::Server::Create(server_options, **store);
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return 1;
  }
  // metrics.history: filled by a housekeeping thread below, read by HTTP; outlives both.
  std::unique_ptr<metrics::StatsHistory> history;
  if (c.history) {
    history = std::make_unique<metrics::StatsHistory>(
        std::chrono::milliseconds(c.history_interval_ms), c.history_samples, c.latency_histograms);
  }
  // HTTP binds before the generic key names are read (and their file removed): a start that
  // fails on a port in use must leave them for the next one.
  // /healthz: ok once the RESP listeners are up. Before `http`, which reads it until it is gone.
  std::atomic<bool> serving{false};
  std::unique_ptr<http::HttpServer> http;
  if (c.http_port != 0) {
    auto h = StartHttp(c, **store, **server, history.get(), serving);
    if (!h.ok()) {
      spdlog::error("{}", h.status().ToString());
      return 1;
    }
    http = std::move(h).value();
    spdlog::info("metrics on http://{}:{}/metrics, dashboard at /", c.http_host, http->port());
  }
  // The generic keys' names and expiry times of the previous run's clean stop: with an NVMe tier
  // their values come back, and so must these (generic_keys_file.h). The file is read once.
  const std::string key_names_path = c.data_dir + "/generic-keys";
  if (tiers.nvme && !c.cold_start) {
    Result<size_t> loaded = (*server)->LoadKeyNames(key_names_path);
    if (loaded.ok() && *loaded > 0) spdlog::info("{} generic key names read back", *loaded);
    if (!loaded.ok()) spdlog::warn("{}", loaded.status().ToString());
  } else {
    std::remove(key_names_path.c_str());
  }
  // Counted before the first command: until the blocks found on NVMe have joined the index, the
  // generic key names read back above must not be taken for names of evicted values.
  std::vector<tiers::nvme::RecoveredBlock> recovered;
  if (tiers.nvme) recovered = tiers.nvme->TakeRecovered();
  (*store)->SetPendingAdoptions(recovered.size());
  if (Status st = (*server)->Start(); !st.ok()) {
    spdlog::error("{}", st.ToString());
    // Nothing was served: the names read back go to the file again, for the next start.
    if (tiers.nvme && !c.cold_start) (void)(*server)->SaveKeyNames(key_names_path);
    return 1;
  }
  serving.store(true, std::memory_order_release);
  // The NVMe blocks of the previous run join the index while the daemon serves: until a block is
  // adopted it is a miss, and a restart does not wait for a million index inserts.
  std::jthread recovery(
      [&tiers, &s = **store, found = std::move(recovered)](std::stop_token stop) mutable {
        pthread_setname_np(pthread_self(), "kvtier-recovery");
        daemon::AdoptRecoveredBlocks(tiers, s, std::move(found), stop);
      });
  if (!c.unix_path.empty()) spdlog::info("listening on unix://{}", c.unix_path);
  if (c.tcp_port != 0) spdlog::info("listening on tcp://{}:{}", c.tcp_host, (*server)->tcp_port());

  store::Store& s = **store;
  std::vector<std::unique_ptr<daemon::PeriodicThread>> housekeeping;
  if (history) {
    housekeeping.push_back(std::make_unique<daemon::PeriodicThread>(
        "kvtier-history", std::chrono::milliseconds(c.history_interval_ms),
        [&s, &history, &srv = **server] {
          const auto now = std::chrono::system_clock::now().time_since_epoch();
          history->Record(std::chrono::duration_cast<std::chrono::milliseconds>(now).count(),
                          s.Stats(), srv.ProcessInfo());
        }));
  }
  housekeeping.push_back(std::make_unique<daemon::PeriodicThread>(
      "kvtier-deadline", std::chrono::milliseconds(100), [&s] {
        const size_t expired = s.ExpireDeadlines();
        if (expired > 0) spdlog::debug("took back {} lapsed leases or reservations", expired);
      }));
  if (tiers.nvme && c.nvme_sync_interval_ms > 0) {
    auto schedule = std::make_shared<tiers::nvme::SyncSchedule>(
        tiers::nvme::SyncSchedule::Intervals{c.nvme_sync_interval_ms,
                                             c.nvme_cache_sync_interval_ms},
        SteadyClock::Instance().NowMicros() / 1000);
    spdlog::info("NVMe sync: write-through copies within {} ms, the other blocks {}",
                 c.nvme_sync_interval_ms,
                 c.nvme_cache_sync_interval_ms == 0
                     ? std::string("with them or at a clean stop")
                     : "within " + std::to_string(c.nvme_cache_sync_interval_ms) + " ms");
    housekeeping.push_back(std::make_unique<daemon::PeriodicThread>(
        "kvtier-nvmesync", std::chrono::milliseconds(schedule->tick_ms()), [&tiers, schedule] {
          const uint64_t now_ms = SteadyClock::Instance().NowMicros() / 1000;
          if (!schedule->Due(tiers.nvme->unsynced_writes(), now_ms)) return;
          if (Status st = tiers.nvme->Sync(); !st.ok())
            spdlog::warn("NVMe sync: {}", st.ToString());
        }));
  }
  spdlog::info("kvtierd {} ready", kVersion);

  const sigset_t signals = StopSignals();
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("{}: shutting down", strsignal(signal_number));

  if (http) http->Stop();
  if (const size_t importers = (*server)->gpu_importers(); importers > 0) {
    spdlog::info("waiting up to {} ms for {} clients to close their GPU pool import",
                 c.gpu_detach_timeout_ms, importers);
    const size_t left =
        (*server)->DrainGpuImporters(std::chrono::milliseconds(c.gpu_detach_timeout_ms));
    if (left > 0) {
      spdlog::warn(
          "{} clients still map the GPU pool after gpu.detach_timeout_ms; it is freed "
          "under them",
          left);
    } else {
      spdlog::info("no client maps the GPU pool any more: no importer left");
    }
  }
  (*server)->Stop();
  recovery.request_stop();
  recovery.join();
  housekeeping.clear();
  // No request is left to wake it; the flush below moves blocks itself. Cleared once its threads
  // are joined: they call the wake-up themselves (a put of a fetched block, a publish).
  mover.reset();
  s.SetMoverWakeup({});
  if (tiers.nvme) {
    // Before the flush, which may take minutes (a large host tier, no flush_seconds) and be cut
    // short by a SIGKILL past the service's grace period: the puts acknowledged as durable are
    // synced now, as the periodic sync (stopped above) would have, and the generic key names
    // are kept (a name whose value does not reach NVMe is dropped at the next start).
    if (Status st = tiers.nvme->Sync(); !st.ok()) spdlog::warn("NVMe sync: {}", st.ToString());
    Result<size_t> saved = (*server)->SaveKeyNames(key_names_path);
    if (saved.ok()) spdlog::info("{} generic key names kept for the restart", *saved);
    if (!saved.ok()) spdlog::warn("generic key names not kept: {}", saved.status().ToString());
    FlushMemoryToNvme(s, c);
    if (Status st = tiers.nvme->Sync(); !st.ok()) spdlog::warn("NVMe sync: {}", st.ToString());
  }
  store::StoreStats final_stats = (*store)->Stats();
  spdlog::info("stopped with {} blocks cached, {} leases left", final_stats.blocks_present,
               final_stats.leases_active);
  // Nothing calls the remote tier any more (the server and the mover are gone, and the statistics
  // above were its last reader); its client ends the calls still in flight, whose callbacks reach
  // into the store, while the store exists.
  tiers.remote.reset();
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) {
  // Signals are taken by sigwait in main only: block them before any thread starts so every
  // thread inherits the mask.
  const sigset_t signals = kvtier::StopSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Replies and requests carry whole KV blocks (MiBs). By default glibc serves such buffers with
  // fresh mmaps and gives them back on free, so every large GET faulted in and zeroed its reply
  // buffer again (about 660 page faults per 2 MiB GET, measured with perf). Keep them in the heap
  // and reuse them instead; the heap's size stays bounded by the peak of concurrent requests.
  mallopt(M_MMAP_THRESHOLD, 512 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);

  auto parsed = kvtier::config::ParseCommandLine(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "kvtierd: %s\n", parsed.status().message().c_str());
    return 2;
  }
  if (parsed->help_requested) {
    std::fputs(parsed->help_text.c_str(), stdout);
    return 0;
  }
  return kvtier::Run(parsed->config);
}
