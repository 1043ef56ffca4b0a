// kvtierd: the kvtier daemon. Wires configuration, tiers, the store, the RESP server and the HTTP
// endpoint together, then waits for SIGINT/SIGTERM.
//
// Start-up order: config -> data directory lock -> host tier -> store -> RESP server -> HTTP ->
// deadline thread. Shutdown runs in reverse: HTTP stops answering, the RESP server stops accepting
// and closes every connection (releasing its leases and aborting its reservations), the deadline
// thread stops, then the store and the tiers are destroyed. Nothing is detached; every thread is
// joined before main returns.
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/units.h"
#include "daemon/config/daemon_config.h"
#include "daemon/http/http_server.h"
#include "daemon/metrics/stats_format.h"
#include "daemon/server/server.h"
#include "daemon/store/store.h"
#include "tiers/host/host_tier.h"

namespace kvtier {
namespace {

constexpr const char* kVersion = "0.1.0";

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

// Takes back lapsed leases and reservations ten times a second.
class DeadlineThread {
 public:
  explicit DeadlineThread(store::Store& store) : store_(store), thread_([this] { Run(); }) {}
  ~DeadlineThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void Run() {
    pthread_setname_np(pthread_self(), "kvtier-deadline");
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) {
      lock.unlock();
      size_t expired = store_.ExpireDeadlines();
      if (expired > 0) spdlog::debug("took back {} lapsed leases or reservations", expired);
      lock.lock();
    }
  }

  store::Store& store_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
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
  o.max_array_len = c.max_array_len;
  o.max_inline_bytes = c.max_inline_bytes;
  o.max_key_bytes = c.max_key_bytes;
  o.max_lookup_keys = c.max_lookup_keys;
  o.max_inflight_bytes_per_client = c.max_inflight_bytes_per_client;
  o.idle_timeout_ms = c.idle_timeout_ms;
  o.reader_wait_ms = c.reader_wait_ms;
  o.max_clients = c.max_clients;
  return o;
}

int Run(const config::DaemonConfig& c) {
  spdlog::set_level(spdlog::level::from_str(c.log_level));
  // Operators tail the log through pipes and journald: every line goes out as it is written.
  spdlog::flush_on(spdlog::level::trace);
  const auto started = std::chrono::steady_clock::now();

  auto lock = DataDirLock::Acquire(c.data_dir);
  if (!lock.ok()) {
    spdlog::error("{}", lock.status().ToString());
    return 1;
  }
  if (Status st = EnsureSocketDir(c.unix_path); !st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  auto host = tiers::HostTier::Create({.capacity_bytes = c.host_bytes,
                                       .slab_bytes = c.slab_bytes,
                                       .try_huge_pages = c.huge_pages,
                                       .try_mlock = c.mlock});
  if (!host.ok()) {
    spdlog::error("host tier: {}", host.status().ToString());
    return 1;
  }
  const tiers::HostArena& arena = (*host)->arena();
  spdlog::info("host tier: {} ({} pages{})", FormatBytes(c.host_bytes),
               arena.huge_pages() ? "huge" : "normal",
               arena.locked()                   ? ", locked in RAM"
               : arena.lock_status().ok()       ? ", not locked (tiers.mlock is off)"
                                                : ", not locked: " + arena.lock_status().message());

  store::StoreOptions store_options;
  store_options.lease_timeout_us = c.lease_timeout_ms * 1000;
  store_options.reservation_timeout_us = c.reservation_timeout_ms * 1000;
  store_options.index.policy = c.eviction_policy;
  store_options.index.capacity_hint_blocks = 0;
  store_options.max_leases = c.max_leases;
  store_options.max_reservations = c.max_reservations;
  auto store = store::Store::Create(store_options, {host->get()}, SteadyClock::Instance());
  if (!store.ok()) {
    spdlog::error("store: {}", store.status().ToString());
    return 1;
  }

  auto server = server::Server::Create(ServerOptionsFrom(c), **store, host->get());
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return 1;
  }
  if (Status st = (*server)->Start(); !st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  if (!c.unix_path.empty()) spdlog::info("listening on unix://{}", c.unix_path);
  if (c.tcp_port != 0) spdlog::info("listening on tcp://{}:{}", c.tcp_host, (*server)->tcp_port());

  metrics::ProcessInfo base_info;
  base_info.version = kVersion;
  base_info.gpu_tier_note = "no GPU tier: not implemented in this version";
  base_info.nvme_tier_note = "no NVMe tier: not implemented in this version";
  auto process_info = [&]() {
    metrics::ProcessInfo p = base_info;
    p.uptime_s = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                           std::chrono::steady_clock::now() - started)
                                           .count());
    server::ServerStats s = (*server)->Stats();
    p.connected_clients = s.connected_clients;
    p.total_connections = s.total_connections;
    p.commands_processed = s.commands_processed;
    p.protocol_errors = s.protocol_errors;
    p.lapsed_reply_leases = s.lapsed_reply_leases;
    return p;
  };
  std::unique_ptr<http::HttpServer> http;
  if (c.http_port != 0) {
    auto h = http::HttpServer::Start(
        c.http_host, c.http_port,
        {.metrics = [&] { return metrics::StatsToPrometheus((*store)->Stats(), process_info()); },
         .stats = [&] { return metrics::StatsToJson((*store)->Stats(), process_info()); }});
    if (!h.ok()) {
      spdlog::error("{}", h.status().ToString());
      (*server)->Stop();
      return 1;
    }
    http = std::move(h).value();
    spdlog::info("metrics on http://{}:{}/metrics", c.http_host, http->port());
  }
  auto deadlines = std::make_unique<DeadlineThread>(**store);
  spdlog::info("kvtierd {} ready", kVersion);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("{}: shutting down", strsignal(signal_number));

  if (http) http->Stop();
  (*server)->Stop();
  deadlines.reset();
  store::StoreStats final_stats = (*store)->Stats();
  spdlog::info("stopped with {} blocks cached, {} leases left", final_stats.blocks_present,
               final_stats.leases_active);
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) {
  // Signals are taken by sigwait in main only: block them before any thread starts so every
  // thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
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
