// RedisClusterClient: construction, the I/O thread, shutdown and the entry points. The rounds of a
// call are in cluster_ops.cc, the slot map in cluster_topology.cc.
#include "tiers/remote/redis_cluster_client.h"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <future>
#include <utility>

#include "tiers/remote/cluster_op.h"

namespace kvtier::tiers::remote {
namespace {

NodeOptions MakeNodeOptions(const RedisClusterOptions& o, bool read_only,
                            std::shared_ptr<asio::ssl::context> tls) {
  NodeOptions n;
  n.connection.read_only = read_only;
  n.connection.resolve = o.resolve;
  n.connection.tls = std::move(tls);
  n.connection.tls_server_name = o.tls.server_name;
  n.connection.user = o.user;
  n.connection.password = o.password;
  n.connection.parser.max_bulk_bytes = o.max_value_bytes;
  // The operator's own Redis: a value's buffer is allocated whole as its header arrives (a 2 MiB
  // block would otherwise be copied again at each doubling of its buffer).
  n.connection.parser.reserve_declared_up_to = size_t{64} << 20;
  n.max_connections = o.connections_per_node;
  n.connect_timeout = o.connect_timeout;
  n.breaker = o.breaker;
  n.shortest_judged_timeout = o.shortest_judged_timeout;
  return n;
}

Status ValidateOptions(const RedisClusterOptions& o) {
  if (o.seeds.empty()) return InvalidArgument("remote store: no seed node (host:port)");
  if (o.connect_timeout.count() <= 0) {
    return InvalidArgument("remote store: connect_timeout must be positive");
  }
  if (o.connections_per_node == 0) {
    return InvalidArgument("remote store: connections_per_node must be at least 1");
  }
  if (o.breaker.failure_threshold < 1 || o.breaker.initial_backoff.count() <= 0 ||
      o.breaker.max_backoff < o.breaker.initial_backoff) {
    return InvalidArgument(
        "remote store: the breaker needs a threshold >= 1 and 0 < initial backoff <= max backoff");
  }
  if (o.max_redirects < 1) return InvalidArgument("remote store: max_redirects must be >= 1");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<RedisClusterClient>> RedisClusterClient::Open(RedisClusterOptions options) {
  KVTIER_RETURN_IF_ERROR(ValidateOptions(options));
  std::shared_ptr<asio::ssl::context> tls;
  if (options.tls.enabled) {
    KVTIER_ASSIGN_OR_RETURN(tls, MakeTlsContext(options.tls));
  }
  std::unique_ptr<RedisClusterClient> client(
      new RedisClusterClient(std::move(options), std::move(tls)));
  const Status reached = client->RefreshTopology();
  if (client->options_.refresh_interval.count() > 0) {
    asio::co_spawn(client->io_, client->PeriodicRefresh(), asio::detached);
  }
  if (!reached.ok()) {
    if (!client->options_.open_unreachable || reached.code() != StatusCode::kDeviceError) {
      return reached;
    }
    spdlog::warn("remote: {}; going on without the remote store until it answers",
                 reached.message());
    asio::co_spawn(client->io_, client->ReachLoop(), asio::detached);
    return client;
  }
  spdlog::info("remote: connected to {} ({} masters)",
               client->cluster_mode_ ? "a Redis Cluster" : "a single Redis server",
               client->counters_.masters.load());
  return client;
}

RedisClusterClient::RedisClusterClient(RedisClusterOptions options,
                                       std::shared_ptr<asio::ssl::context> tls)
    : options_(std::move(options)),
      node_options_(MakeNodeOptions(options_, /*read_only=*/false, tls)),
      cluster_node_options_(MakeNodeOptions(options_, /*read_only=*/true, tls)),
      work_(io_.get_executor()) {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), options_.thread_name.substr(0, 15).c_str());
    // Every coroutine catches its own errors; an exception here is a bug, and the loop must keep
    // running so that pending calls still get their answers.
    while (true) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("remote: I/O thread: {}", e.what());
      }
    }
  });
}

RedisClusterClient::~RedisClusterClient() {
  stopping_ = true;
  asio::post(io_, [this] { ShutdownOnIoThread(); });
  work_.reset();
  thread_.join();
}

void RedisClusterClient::ShutdownOnIoThread() {
  for (auto& [address, node] : nodes_) node->Shutdown();
  for (const std::weak_ptr<ClusterNode>& retired : retired_nodes_) {
    if (const std::shared_ptr<ClusterNode> node = retired.lock()) node->Shutdown();
  }
  for (const auto& conn : topology_conns_) conn->Close();
  refresh_timer_.cancel();
  reach_timer_.cancel();
  periodic_timer_.cancel();
}

bool RedisClusterClient::OnCallbackThread() const {
  return std::this_thread::get_id() == thread_.get_id();
}

const std::shared_ptr<ClusterNode>& RedisClusterClient::NodeAt(const HostPort& address) {
  std::shared_ptr<ClusterNode>& node = nodes_[address];
  // Data calls start once the mode is known (until then they fail at once).
  if (!node) {
    node = std::make_shared<ClusterNode>(
        io_, address, cluster_mode_ ? cluster_node_options_ : node_options_, counters_);
  }
  return node;
}

void RedisClusterClient::Start(std::shared_ptr<Op> op) {
  Add(counters_.batches);
  if (stopping_) {
    // The I/O thread may be gone: answered here, on the calling thread.
    for (auto& answer : op->answers) answer = ShuttingDown("remote store client is shutting down");
    op->Finish();
    return;
  }
  asio::co_spawn(io_, RunOp(op), [op](std::exception_ptr error) {
    if (error) {
      for (auto& answer : op->answers) {
        if (answer.status().code() == StatusCode::kInternal) {
          answer = Internal("remote call failed inside the client");
        }
      }
    }
    op->Finish();
  });
}

void RedisClusterClient::StartGet(std::vector<std::string> keys, std::chrono::milliseconds timeout,
                                  GetCallback done) {
  auto op = std::make_shared<Op>(OpKind::kGet, std::move(keys), timeout);
  op->on_values = std::move(done);
  Start(std::move(op));
}

void RedisClusterClient::StartSet(std::vector<RemoteWrite> writes, std::chrono::milliseconds ttl,
                                  std::chrono::milliseconds timeout, StatusCallback done) {
  std::vector<std::string> keys;
  keys.reserve(writes.size());
  for (const RemoteWrite& w : writes) keys.push_back(w.key);
  auto op = std::make_shared<Op>(OpKind::kSet, std::move(keys), timeout);
  op->writes = std::move(writes);
  op->ttl_ms = std::to_string(ttl.count());
  op->on_statuses = std::move(done);
  if (ttl.count() < 1) {
    for (auto& answer : op->answers) answer = InvalidArgument("remote SET: ttl must be >= 1 ms");
    op->Finish();
    return;
  }
  Start(std::move(op));
}

void RedisClusterClient::StartExists(std::vector<std::string> keys,
                                     std::chrono::milliseconds timeout, StatusCallback done) {
  auto op = std::make_shared<Op>(OpKind::kExists, std::move(keys), timeout);
  op->on_statuses = std::move(done);
  Start(std::move(op));
}

void RedisClusterClient::StartDelete(std::vector<std::string> keys,
                                     std::chrono::milliseconds timeout, StatusCallback done) {
  auto op = std::make_shared<Op>(OpKind::kDelete, std::move(keys), timeout);
  op->on_statuses = std::move(done);
  Start(std::move(op));
}

std::vector<std::string> RedisClusterClient::Masters() {
  if (OnCallbackThread() || stopping_) return {};
  std::promise<std::vector<std::string>> promise;
  auto answer = promise.get_future();
  asio::post(io_, [this, &promise] {
    std::vector<std::string> out;
    for (const HostPort& m : slot_map_.Masters()) out.push_back(m.ToString());
    std::sort(out.begin(), out.end());
    promise.set_value(std::move(out));
  });
  return answer.get();
}

Status RedisClusterClient::RefreshTopology() {
  if (OnCallbackThread()) return Internal("RefreshTopology called on the remote I/O thread");
  if (stopping_) return ShuttingDown("remote store client is shutting down");
  std::promise<Status> promise;
  auto answer = promise.get_future();
  asio::co_spawn(io_, Refresh(), [&promise](std::exception_ptr error, Status status) {
    promise.set_value(error ? Internal("topology refresh failed inside the client") : status);
  });
  return answer.get();
}

}  // namespace kvtier::tiers::remote
