#include "daemon/server/server.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/accept_backoff.h"
#include "common/clock.h"
#include "common/thread_annotations.h"
#include "daemon/server/asio.h"
#include "daemon/server/connection.h"
#include "daemon/server/generic_keys_file.h"
#include "daemon/server/generic_keyspace.h"
#include "daemon/server/generic_values.h"
#include "daemon/server/info.h"
#include "daemon/server/listeners.h"
#include "daemon/server/server_context.h"
#include "daemon/store/store.h"

namespace kvtier::server {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

constexpr int kMaxIoThreads = 256;
// The expiry sweep settles this many generic keys every interval (SettleKeys): 40,000 keys
// a second, a full pass over a million keys in under half a minute, for about a millisecond of
// one thread per interval.
constexpr auto kSweepInterval = std::chrono::milliseconds(100);
constexpr size_t kSweepKeys = 4096;

Status CheckPositive(size_t value, std::string_view key) {
  if (value > 0) return Status::Ok();
  return InvalidArgument(std::string(key) + ": must be positive");
}

Status ValidateListeners(const ServerOptions& o) {
  if (o.unix_path.empty() && o.tcp_port == 0 && !o.tcp_ephemeral) {
    return InvalidArgument("listen: neither unix_path nor tcp_port is set");
  }
  if (o.tcp_ephemeral && o.tcp_port != 0) {
    return InvalidArgument("tcp_port: set tcp_port or tcp_ephemeral, not both");
  }
  if (o.unix_mode > 0777) return InvalidArgument("unix_mode: must be at most 0777");
  if (o.tcp_port == 0 && !o.tcp_ephemeral) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(asio::ip::address address, ParseTcpHost(o.tcp_host));
  if (!address.is_loopback() && o.password.empty()) {
    return InvalidArgument("password: required when tcp_host (" + o.tcp_host +
                           ") is not a loopback address; set a password or listen on 127.0.0.1");
  }
  return Status::Ok();
}

Status ValidateOptions(const ServerOptions& o) {
  KVTIER_RETURN_IF_ERROR(ValidateListeners(o));
  if (o.password.size() > kPreAuthBulkBytes) {
    return InvalidArgument("password: longer than " + std::to_string(kPreAuthBulkBytes) +
                           " bytes, the largest argument a client may send before AUTH");
  }
  if (o.io_threads < 1 || o.io_threads > kMaxIoThreads) {
    return InvalidArgument("io_threads: must be in [1, " + std::to_string(kMaxIoThreads) + "]");
  }
  KVTIER_RETURN_IF_ERROR(CheckPositive(o.max_bulk_bytes, "max_bulk_bytes"));
  KVTIER_RETURN_IF_ERROR(CheckPositive(o.max_array_len, "max_array_len"));
  KVTIER_RETURN_IF_ERROR(CheckPositive(o.max_inline_bytes, "max_inline_bytes"));
  KVTIER_RETURN_IF_ERROR(CheckPositive(o.max_command_bytes, "max_command_bytes"));
  KVTIER_RETURN_IF_ERROR(CheckPositive(o.max_key_bytes, "max_key_bytes"));
  KVTIER_RETURN_IF_ERROR(CheckPositive(o.max_lookup_keys, "max_lookup_keys"));
  KVTIER_RETURN_IF_ERROR(
      CheckPositive(o.max_inflight_bytes_per_client, "max_inflight_bytes_per_client"));
  return CheckPositive(o.max_clients, "max_clients");
}

}  // namespace

// One io_context run by io_threads threads, rather than one io_context per core: a command may
// hold its thread for a while (copying a multi-MiB block, evicting), and with a shared queue any
// idle thread picks up the other connections' work meanwhile, where a per-core context would
// leave the clients pinned to that core waiting. The price, a shared scheduler queue and a strand
// per connection, is small next to block-sized copies.
struct Server::Impl {
  using Strand = asio::strand<asio::io_context::executor_type>;

  Impl(const ServerOptions& options, store::Store& store, std::optional<SharedArena> arena,
       bool gpu_pool_shared)
      : context{options, store, arena, gpu_pool_shared, GenericNamespaceId(), 0, 0, {}, {}},
        unix_strand(asio::make_strand(io)),
        tcp_strand(asio::make_strand(io)),
        sweep_strand(asio::make_strand(io)),
        sweep_timer(sweep_strand) {}

  Status OpenListeners();
  void StartThreads();
  template <typename Acceptor>
  asio::awaitable<void> AcceptLoop(Acceptor& acceptor, Transport transport);
  template <typename Socket>
  void Admit(Socket socket, Transport transport);
  // Takes a connection slot; false when the server is stopping or full (then `why` says which).
  bool TakeSlot(uint64_t id, const std::shared_ptr<Connection>& conn, std::string_view* why);
  void Forget(uint64_t id);
  void CloseAll();
  asio::awaitable<void> SweepLoop();

  ServerContext context;
  // Declared after `context`, so that the io_context, and with it any connection not yet freed,
  // is destroyed before the context the connections refer to.
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<asio::local::stream_protocol::acceptor> unix_acceptor;
  std::optional<asio::ip::tcp::acceptor> tcp_acceptor;
  Strand unix_strand;
  Strand tcp_strand;
  Strand sweep_strand;
  asio::steady_timer sweep_timer;  // on sweep_strand
  bool sweep_stopped = false;      // on sweep_strand
  std::vector<std::thread> threads;
  std::atomic<uint64_t> next_id{1};
  bool started = false;
  bool stopped = false;

  Mutex mu;
  bool stopping GUARDED_BY(mu) = false;
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> connections GUARDED_BY(mu);
};

Status Server::Impl::OpenListeners() {
  const ServerOptions& o = context.options;
  if (!o.unix_path.empty()) {
    KVTIER_ASSIGN_OR_RETURN(unix_acceptor, OpenUnixListener(io, o.unix_path, o.unix_mode));
  }
  if (o.tcp_port != 0 || o.tcp_ephemeral) {
    KVTIER_ASSIGN_OR_RETURN(asio::ip::address address, ParseTcpHost(o.tcp_host));
    KVTIER_ASSIGN_OR_RETURN(tcp_acceptor, OpenTcpListener(io, address, o.tcp_port));
    error_code ec;
    context.tcp_port = tcp_acceptor->local_endpoint(ec).port();
  }
  return Status::Ok();
}

void Server::Impl::StartThreads() {
  work.emplace(io.get_executor());
  auto ignore = [](std::exception_ptr) {};
  if (unix_acceptor)
    asio::co_spawn(unix_strand, AcceptLoop(*unix_acceptor, Transport::kUnix), ignore);
  if (tcp_acceptor) asio::co_spawn(tcp_strand, AcceptLoop(*tcp_acceptor, Transport::kTcp), ignore);
  asio::co_spawn(sweep_strand, SweepLoop(), ignore);
  for (int i = 0; i < context.options.io_threads; ++i) {
    threads.emplace_back([this, i] {
      const std::string name = "kvtier-io-" + std::to_string(i);
      pthread_setname_np(pthread_self(), name.c_str());
      // A handler that throws must not take the thread (and the whole daemon) down with it.
      for (;;) {
        try {
          io.run();
          return;
        } catch (...) {
        }
      }
    });
  }
}

template <typename Acceptor>
asio::awaitable<void> Server::Impl::AcceptLoop(Acceptor& acceptor, Transport transport) {
  asio::steady_timer backoff(co_await asio::this_coro::executor);
  for (;;) {
    error_code ec;
    auto socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      co_await PauseAfterFailedAccept(backoff, context.counters.failed_accepts);
      continue;
    }
    try {
      Admit(std::move(socket), transport);
    } catch (const std::exception&) {
      // Out of memory for one more connection: that client is dropped, the listener carries on.
    }
  }
}

asio::awaitable<void> Server::Impl::SweepLoop() {
  uint64_t cursor = 0;
  for (;;) {
    sweep_timer.expires_after(kSweepInterval);
    error_code ec;
    co_await sweep_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec || sweep_stopped) co_return;
    cursor = SettleKeys(context, cursor, kSweepKeys);
  }
}

template <typename Socket>
void Server::Impl::Admit(Socket socket, Transport transport) {
  context.counters.total_connections.fetch_add(1);
  const int fd = socket.native_handle();
  const std::vector<uid_t>& allowed = context.options.allowed_uids;
  if (transport == Transport::kUnix && !allowed.empty()) {
    std::optional<uid_t> uid = PeerUid(fd);
    if (!uid || std::find(allowed.begin(), allowed.end(), *uid) == allowed.end()) {
      context.counters.rejected_connections.fetch_add(1);
      SendRefusal(fd, "-NOPERM this user may not connect\r\n");
      return;  // the socket closes as it goes out of scope
    }
  }
  if constexpr (std::is_same_v<typename Socket::protocol_type, asio::ip::tcp>) {
    error_code ec;
    socket.set_option(asio::ip::tcp::no_delay(true), ec);  // replies are small and latency-bound
  }
  const uint64_t id = next_id.fetch_add(1);
  auto conn = std::make_shared<Connection>(Connection::Socket(std::move(socket)), transport, id,
                                           context, [this, id] { Forget(id); });
  std::string_view why;
  if (!TakeSlot(id, conn, &why)) {
    context.counters.rejected_connections.fetch_add(1);
    SendRefusal(fd, why);
    return;  // the connection never started; destroying it closes the socket
  }
  conn->Start();
}

bool Server::Impl::TakeSlot(uint64_t id, const std::shared_ptr<Connection>& conn,
                            std::string_view* why) {
  MutexLock lock(mu);
  if (stopping) {
    *why = "-SHUTDOWN the server is stopping\r\n";
    return false;
  }
  if (connections.size() >= context.options.max_clients) {
    *why = "-BUSY max number of clients reached\r\n";
    return false;
  }
  connections.emplace(id, conn);
  context.counters.connected_clients.fetch_add(1);
  return true;
}

void Server::Impl::Forget(uint64_t id) {
  MutexLock lock(mu);
  connections.erase(id);
}

void Server::Impl::CloseAll() {
  std::vector<std::shared_ptr<Connection>> open;
  {
    MutexLock lock(mu);
    stopping = true;
    for (auto& [id, weak] : connections) {
      if (auto conn = weak.lock()) open.push_back(std::move(conn));
    }
  }
  for (auto& conn : open) conn->Close();
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  // First, so that no mover thread posts to this server's strands while they go away.
  impl_->context.store.SetMoveListener({});
  impl_->context.mover_waiters->Shutdown();
  Stop();
}

Result<std::unique_ptr<Server>> Server::Create(const ServerOptions& options, store::Store& store) {
  KVTIER_RETURN_IF_ERROR(ValidateOptions(options));
  std::optional<SharedArena> arena;
  if (options.shared_memory && store.tier(TierId::kHost) != nullptr) {
    Result<tiers::PoolExport> exported = store.ExportForClients(TierId::kHost);
    if (!exported.ok()) {
      return Status(exported.status().code(), "host arena: " + exported.status().message());
    }
    arena = SharedArena{.fd = exported->fd, .bytes = exported->pool_bytes, .tier = TierId::kHost};
  }
  auto impl = std::make_unique<Impl>(options, store, arena, store.tier(TierId::kGpu) != nullptr);
  store::NamespaceInfo generic;
  generic.id = impl->context.generic_ns;
  generic.label = "generic";
  generic.node_local = true;  // names any client chose: never shared with other nodes
  KVTIER_RETURN_IF_ERROR(store.RegisterNamespace(generic));
  impl->context.start_time_us = SteadyClock::Instance().NowMicros();
  store.SetMoveListener([waiters = impl->context.mover_waiters] { waiters->Notify(); });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Status Server::Start() {
  if (impl_->started) return InvalidArgument("server already started");
  impl_->started = true;
  KVTIER_RETURN_IF_ERROR(impl_->OpenListeners());
  impl_->StartThreads();
  return Status::Ok();
}

size_t Server::DrainGpuImporters(std::chrono::milliseconds timeout) {
  impl_->context.draining_gpu_importers.store(true);
  return impl_->context.gpu_importers.WaitForNone(timeout);
}

size_t Server::gpu_importers() const { return impl_->context.gpu_importers.count(); }

void Server::Stop() {
  Impl& impl = *impl_;
  if (!impl.started || impl.stopped) return;
  impl.stopped = true;
  // Listeners first, so no new client slips in while the open ones are being closed.
  asio::post(impl.unix_strand, [&impl] {
    if (impl.unix_acceptor) impl.unix_acceptor->close();
  });
  asio::post(impl.tcp_strand, [&impl] {
    if (impl.tcp_acceptor) impl.tcp_acceptor->close();
  });
  asio::post(impl.sweep_strand, [&impl] {
    impl.sweep_stopped = true;
    impl.sweep_timer.cancel();
  });
  impl.CloseAll();
  // Without the guard, run() returns once every connection coroutine has ended its session.
  impl.work.reset();
  for (std::thread& t : impl.threads) t.join();
  impl.threads.clear();
  if (impl.unix_acceptor) unlink(impl.context.options.unix_path.c_str());
}

Result<size_t> Server::LoadKeyNames(const std::string& path) {
  return LoadGenericKeys(impl_->context.generic_keys, path);
}

Result<size_t> Server::SaveKeyNames(const std::string& path) {
  return SaveGenericKeys(impl_->context.generic_keys, path);
}

uint16_t Server::tcp_port() const { return impl_->context.tcp_port; }

const std::string& Server::unix_path() const { return impl_->context.options.unix_path; }

metrics::ProcessInfo Server::ProcessInfo() const { return MakeProcessInfo(impl_->context); }

ServerStats Server::Stats() const {
  const ServerCounters& c = impl_->context.counters;
  ServerStats s;
  s.connected_clients = c.connected_clients.load();
  s.total_connections = c.total_connections.load();
  s.commands_processed = c.commands_processed.load();
  s.protocol_errors = c.protocol_errors.load();
  s.lapsed_reply_leases = c.lapsed_reply_leases.load();
  s.stalled_reply_closes = c.stalled_reply_closes.load();
  s.staged_set_values = c.staged_values.load();
  s.rejected_connections = c.rejected_connections.load();
  s.failed_accepts = c.failed_accepts.load();
  return s;
}

}  // namespace kvtier::server
