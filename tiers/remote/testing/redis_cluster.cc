#include "tiers/remote/testing/redis_cluster.h"

#include <algorithm>
#include <sstream>

namespace kvtier::tiers::remote::testing {
namespace {

using std::chrono::milliseconds;

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// The value of `field` in INFO-style "name:value" text; empty when absent.
std::string InfoField(const std::string& info, const std::string& field) {
  std::istringstream lines(info);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(field + ":", 0) == 0) return Trim(line.substr(field.size() + 1));
  }
  return "";
}

}  // namespace

Result<std::unique_ptr<RedisCluster>> RedisCluster::Start(Options options) {
  if (RedisServerPath().empty() || RedisCliPath().empty()) {
    return NotFound("redis-server or redis-cli not found at build time");
  }
  std::unique_ptr<RedisCluster> cluster(new RedisCluster(options));
  const int total = options.masters * (1 + options.replicas_per_master);
  std::vector<std::string> args = {
      "--cluster-enabled",      "yes",
      "--cluster-config-file",  "nodes.conf",
      "--cluster-node-timeout", std::to_string(options.node_timeout.count())};
  if (options.tls != nullptr) {
    args.insert(args.end(),
                {"--tls-port", std::string(RedisProcess::kTlsPortPlaceholder), "--tls-cluster",
                 "yes", "--tls-replication", "yes", "--tls-cert-file",
                 options.tls->server_cert_file, "--tls-key-file", options.tls->server_key_file,
                 "--tls-ca-cert-file", options.tls->ca_file, "--tls-auth-clients", "no"});
  }
  for (int i = 0; i < total; ++i) {
    KVTIER_ASSIGN_OR_RETURN(auto node, RedisProcess::Start(cluster->dir_.path(), args));
    cluster->nodes_.push_back(std::move(node));
  }
  KVTIER_RETURN_IF_ERROR(cluster->Create());
  return cluster;
}

Status RedisCluster::Create() {
  std::vector<std::string> args = {RedisCliPath(), "--cluster", "create"};
  for (const auto& n : nodes_) args.push_back(n->address().ToString());
  args.insert(args.end(), {"--cluster-replicas", std::to_string(options_.replicas_per_master),
                           "--cluster-yes"});
  KVTIER_RETURN_IF_ERROR(RunProgram(args).status());
  // Returns as soon as it has; 30 s for a machine whose disk is busy (nodes fsync nodes.conf).
  if (!WaitConverged(milliseconds(30000))) return Timeout("cluster did not reach cluster_state:ok");
  return Status::Ok();
}

std::vector<HostPort> RedisCluster::Seeds() const {
  std::vector<HostPort> out;
  for (const auto& n : nodes_) out.push_back(n->address());
  return out;
}

std::vector<HostPort> RedisCluster::TlsSeeds() const {
  std::vector<HostPort> out;
  for (const auto& n : nodes_) out.push_back({"127.0.0.1", n->tls_port()});
  return out;
}

Result<std::string> RedisCluster::Cli(size_t i, const std::vector<std::string>& args) const {
  return testing::Cli(nodes_[i]->port(), args);
}

Result<std::string> RedisCluster::NodeId(size_t i) const {
  KVTIER_ASSIGN_OR_RETURN(std::string id, Cli(i, {"CLUSTER", "MYID"}));
  return Trim(id);
}

int RedisCluster::MasterOfSlot(int slot, size_t asked) const {
  // CLUSTER NODES: one line per node, "<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch>
  // <link> <slot or first-last>...". Migration entries ("[...]") are not ownership.
  const Result<std::string> out = Cli(asked, {"CLUSTER", "NODES"});
  if (!out.ok()) return -1;
  std::istringstream lines(*out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string id, addr, flags, skip;
    fields >> id >> addr >> flags >> skip >> skip >> skip >> skip >> skip;
    if (flags.find("master") == std::string::npos || flags.find("fail") != std::string::npos) {
      continue;
    }
    for (std::string range; fields >> range;) {
      if (range.empty() || range[0] == '[') continue;
      const size_t dash = range.find('-');
      const int first = std::atoi(range.c_str());
      const int last = dash == std::string::npos ? first : std::atoi(range.c_str() + dash + 1);
      if (slot < first || slot > last) continue;
      const int port = std::atoi(addr.c_str() + addr.find(':') + 1);
      for (size_t n = 0; n < nodes_.size(); ++n) {
        if (nodes_[n]->port() == port) return static_cast<int>(n);
      }
    }
  }
  return -1;
}

int RedisCluster::ReplicaOf(size_t master) const {
  const Result<std::string> id = NodeId(master);
  if (!id.ok()) return -1;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (n == master || !nodes_[n]->answering()) continue;
    const Result<std::string> info = Cli(n, {"INFO", "replication"});
    if (!info.ok() || InfoField(*info, "role") != "slave") continue;
    if (std::stoi("0" + InfoField(*info, "master_port")) == nodes_[master]->port()) {
      return static_cast<int>(n);
    }
  }
  return -1;
}

bool RedisCluster::WaitConverged(milliseconds timeout, int slot, int master,
                                 std::vector<size_t> among) const {
  if (among.empty()) {
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (nodes_[n]->answering()) among.push_back(n);
    }
  }
  return PollUntil(timeout, [&] {
    for (const size_t n : among) {
      const Result<std::string> info = Cli(n, {"CLUSTER", "INFO"});
      if (!info.ok() || InfoField(*info, "cluster_state") != "ok") return false;
      if (slot >= 0 && MasterOfSlot(slot, n) != master) return false;
    }
    return true;
  });
}

bool RedisCluster::WaitReplicated(milliseconds timeout) const {
  return PollUntil(timeout, [&] {
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (!nodes_[n]->answering()) continue;
      const Result<std::string> info = Cli(n, {"INFO", "replication"});
      if (!info.ok()) return false;
      if (InfoField(*info, "role") != "slave") continue;
      if (InfoField(*info, "master_link_status") != "up") return false;
      const int master_port = std::stoi("0" + InfoField(*info, "master_port"));
      // A replica of a TLS cluster names its master's TLS port.
      const auto m = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& p) {
        return p->port() == master_port || p->tls_port() == master_port;
      });
      if (m == nodes_.end()) return false;
      const Result<std::string> minfo = testing::Cli((*m)->port(), {"INFO", "replication"});
      if (!minfo.ok() ||
          InfoField(*minfo, "master_repl_offset") != InfoField(*info, "slave_repl_offset")) {
        return false;
      }
    }
    return true;
  });
}

Status RedisCluster::MigrateKeys(size_t from, size_t to, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    KVTIER_RETURN_IF_ERROR(
        Cli(from, {"MIGRATE", "127.0.0.1", std::to_string(nodes_[to]->port()), key, "0", "5000"})
            .status());
  }
  return Status::Ok();
}

Result<int> RedisCluster::BeginMigration(int slot, size_t to,
                                         const std::vector<std::string>& keys) {
  const int from = MasterOfSlot(slot);
  if (from < 0) return NotFound("no master for slot " + std::to_string(slot));
  KVTIER_ASSIGN_OR_RETURN(const std::string from_id, NodeId(static_cast<size_t>(from)));
  KVTIER_ASSIGN_OR_RETURN(const std::string to_id, NodeId(to));
  const std::string s = std::to_string(slot);
  KVTIER_RETURN_IF_ERROR(Cli(to, {"CLUSTER", "SETSLOT", s, "IMPORTING", from_id}).status());
  KVTIER_RETURN_IF_ERROR(
      Cli(static_cast<size_t>(from), {"CLUSTER", "SETSLOT", s, "MIGRATING", to_id}).status());
  KVTIER_RETURN_IF_ERROR(MigrateKeys(static_cast<size_t>(from), to, keys));
  return from;
}

Result<int> RedisCluster::MoveSlot(int slot, size_t to) {
  const std::string s = std::to_string(slot);
  KVTIER_ASSIGN_OR_RETURN(const int from, BeginMigration(slot, to, {}));
  // Every key still in the slot, a batch at a time.
  while (true) {
    KVTIER_ASSIGN_OR_RETURN(const std::string listed, Cli(static_cast<size_t>(from),
                                                          {"CLUSTER", "GETKEYSINSLOT", s, "1000"}));
    std::istringstream lines(listed);
    std::vector<std::string> keys;
    for (std::string k; std::getline(lines, k);) {
      if (!Trim(k).empty()) keys.push_back(Trim(k));
    }
    if (keys.empty()) break;
    KVTIER_RETURN_IF_ERROR(MigrateKeys(static_cast<size_t>(from), to, keys));
  }
  KVTIER_ASSIGN_OR_RETURN(const std::string to_id, NodeId(to));
  KVTIER_RETURN_IF_ERROR(Cli(to, {"CLUSTER", "SETSLOT", s, "NODE", to_id}).status());
  KVTIER_RETURN_IF_ERROR(
      Cli(static_cast<size_t>(from), {"CLUSTER", "SETSLOT", s, "NODE", to_id}).status());
  return from;
}

}  // namespace kvtier::tiers::remote::testing
