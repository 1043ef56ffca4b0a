#include "tiers/remote/cluster_slots.h"

#include <algorithm>
#include <array>

#include "common/resp/protocol.h"

namespace kvtier::tiers::remote {
namespace {

using resp::Reply;
using resp::ReplyType;

// The 256 CRC16/XMODEM remainders of one byte, built at compile time.
constexpr std::array<uint16_t, 256> MakeCrcTable() {
  std::array<uint16_t, 256> table{};
  for (int byte = 0; byte < 256; ++byte) {
    uint16_t crc = static_cast<uint16_t>(byte << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
    table[byte] = crc;
  }
  return table;
}
constexpr std::array<uint16_t, 256> kCrcTable = MakeCrcTable();

Status BadShape(std::string_view what, const HostPort& from) {
  return DeviceError("unexpected " + std::string(what) + " reply from " + from.ToString());
}

bool IsText(const Reply& r) {
  return r.type == ReplyType::kBulkString || r.type == ReplyType::kSimpleString ||
         r.type == ReplyType::kVerbatim;
}

// The value of `field` in a RESP3 map or a RESP2 array of alternating names and values.
const Reply* Field(const Reply& map, std::string_view field) {
  if (map.type != ReplyType::kMap && map.type != ReplyType::kArray) return nullptr;
  for (size_t i = 0; i + 1 < map.elements.size(); i += 2) {
    if (IsText(map.elements[i]) && map.elements[i].str == field) return &map.elements[i + 1];
  }
  return nullptr;
}

std::string_view TextOf(const Reply* r) {
  if (r == nullptr || !IsText(*r)) return {};
  return r->str;
}

// A node's address from its host text and port; `answered_by` fills an empty host.
std::optional<HostPort> NodeAddress(std::string_view host, int64_t port,
                                    const HostPort& answered_by) {
  if (host == "?" || port <= 0 || port > 65535) return std::nullopt;
  return HostPort{host.empty() ? answered_by.host : std::string(host), static_cast<uint16_t>(port)};
}

// The address of one node of a CLUSTER SHARDS shard.
// A TLS client (`tls`) takes the node's "tls-port", where the cluster has one.
std::optional<HostPort> ShardNodeAddress(const Reply& node, const HostPort& answered_by, bool tls) {
  const Reply* port = tls ? Field(node, "tls-port") : nullptr;
  if (port == nullptr) port = Field(node, "port");
  std::string_view host = TextOf(Field(node, "endpoint"));
  if (host.empty() || host == "?") host = TextOf(Field(node, "ip"));
  return NodeAddress(host, port != nullptr ? port->integer : 0, answered_by);
}

// The master of one CLUSTER SHARDS shard, or nullopt when it lists none usable.
std::optional<HostPort> ShardMaster(const Reply& nodes, const HostPort& answered_by, bool tls) {
  std::optional<HostPort> best;
  for (const Reply& node : nodes.elements) {
    if (TextOf(Field(node, "role")) != "master") continue;
    const auto addr = ShardNodeAddress(node, answered_by, tls);
    if (!addr) continue;
    if (TextOf(Field(node, "health")) == "online") return addr;
    if (!best) best = addr;
  }
  return best;
}

// The replicas of one CLUSTER SHARDS shard that have not failed. "loading" is kept: Redis 7.0
// says it of every replica whose replication offset the answering node last heard as 0, which
// lags behind the replica itself (a replica still loading answers LOADING: a miss).
std::vector<HostPort> ShardReplicas(const Reply& nodes, const HostPort& answered_by, bool tls) {
  std::vector<HostPort> replicas;
  for (const Reply& node : nodes.elements) {
    if (TextOf(Field(node, "role")) != "replica" || TextOf(Field(node, "health")) == "failed") {
      continue;
    }
    if (const auto addr = ShardNodeAddress(node, answered_by, tls)) replicas.push_back(*addr);
  }
  return replicas;
}

}  // namespace

uint16_t Crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (const char c : bytes) {
    crc = static_cast<uint16_t>((crc << 8) ^
                                kCrcTable[((crc >> 8) ^ static_cast<uint8_t>(c)) & 0xFF]);
  }
  return crc;
}

int KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    // "{}" is no tag: the whole key is hashed.
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) & (kSlotCount - 1);
}

SlotMap SlotMap::SingleNode(HostPort node) {
  SlotMap map;
  map.Assign(0, kSlotCount - 1, node);
  return map;
}

const HostPort* SlotMap::NodeOf(int slot) const {
  if (slot < 0 || slot >= kSlotCount || slots_[slot] == kNoNode) return nullptr;
  return &nodes_[slots_[slot]];
}

std::vector<HostPort> SlotMap::ReplicasOf(int slot) const {
  std::vector<HostPort> out;
  if (slot < 0 || slot >= kSlotCount || slots_[slot] == kNoNode) return out;
  for (const uint16_t index : replicas_[slots_[slot]]) out.push_back(nodes_[index]);
  return out;
}

void SlotMap::SetReplicas(const HostPort& master, const std::vector<HostPort>& replicas) {
  std::vector<uint16_t> indexes;
  for (const HostPort& replica : replicas) indexes.push_back(IndexOf(replica));
  replicas_[IndexOf(master)] = std::move(indexes);
}

bool SlotMap::SameRoutesAs(const SlotMap& other) const {
  std::vector<uint16_t> in_other(nodes_.size(), kNoNode);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const auto it = std::find(other.nodes_.begin(), other.nodes_.end(), nodes_[i]);
    if (it != other.nodes_.end()) in_other[i] = static_cast<uint16_t>(it - other.nodes_.begin());
  }
  const auto names = [](const SlotMap& map, const std::vector<uint16_t>& indexes) {
    std::vector<HostPort> out;
    for (const uint16_t index : indexes) out.push_back(map.nodes_[index]);
    std::sort(out.begin(), out.end());
    return out;
  };
  for (int slot = 0; slot < kSlotCount; ++slot) {
    const uint16_t mine = slots_[slot];
    const uint16_t theirs = other.slots_[slot];
    if (mine == kNoNode || theirs == kNoNode) {
      if (mine != theirs) return false;
      continue;
    }
    if (in_other[mine] != theirs) return false;
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (in_other[i] == kNoNode) continue;  // not a master of this map: it serves no slot
    if (names(*this, replicas_[i]) != names(other, other.replicas_[in_other[i]])) return false;
  }
  return true;
}

uint16_t SlotMap::IndexOf(const HostPort& node) {
  const auto it = std::find(nodes_.begin(), nodes_.end(), node);
  if (it != nodes_.end()) return static_cast<uint16_t>(it - nodes_.begin());
  nodes_.push_back(node);
  replicas_.emplace_back();
  return static_cast<uint16_t>(nodes_.size() - 1);
}

void SlotMap::Assign(int first, int last, const HostPort& node) {
  first = std::max(first, 0);
  last = std::min(last, kSlotCount - 1);
  if (first > last) return;
  const uint16_t index = IndexOf(node);
  std::fill(slots_.begin() + first, slots_.begin() + last + 1, index);
}

std::vector<HostPort> SlotMap::Masters() const {
  std::vector<bool> used(nodes_.size(), false);
  for (const uint16_t index : slots_) {
    if (index != kNoNode) used[index] = true;
  }
  std::vector<HostPort> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (used[i]) out.push_back(nodes_[i]);
  }
  return out;
}

std::vector<HostPort> SlotMap::Nodes() const {
  std::vector<bool> serves(nodes_.size(), false);
  for (const uint16_t index : slots_) {
    if (index != kNoNode) serves[index] = true;
  }
  std::vector<bool> named = serves;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!serves[i]) continue;
    for (const uint16_t replica : replicas_[i]) named[replica] = true;
  }
  std::vector<HostPort> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (named[i]) out.push_back(nodes_[i]);
  }
  return out;
}

int SlotMap::covered_slots() const {
  return static_cast<int>(
      std::count_if(slots_.begin(), slots_.end(), [](uint16_t index) { return index != kNoNode; }));
}

std::optional<Redirect> ParseRedirect(std::string_view error) {
  Redirect r;
  if (error.starts_with("MOVED ")) {
    r.kind = Redirect::Kind::kMoved;
  } else if (error.starts_with("ASK ")) {
    r.kind = Redirect::Kind::kAsk;
  } else {
    return std::nullopt;
  }
  error.remove_prefix(error.find(' ') + 1);
  const size_t space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::optional<int64_t> slot = resp::ParseInt64(error.substr(0, space));
  if (!slot || *slot < 0 || *slot >= kSlotCount) return std::nullopt;
  r.slot = static_cast<int>(*slot);
  // Redis writes the target as ip:port with an IPv6 address unbracketed ("MOVED 1 ::1:7000"),
  // and with an empty host for "the node that answered" ("MOVED 3999 :6381", the caller supplies
  // the host): the port is what follows the last colon.
  const std::string_view target = error.substr(space + 1);
  const size_t colon = target.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const auto port = resp::ParseInt64(target.substr(colon + 1));
  if (!port || *port <= 0 || *port > 65535) return std::nullopt;
  std::string_view host = target.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  r.target = HostPort{std::string(host), static_cast<uint16_t>(*port)};
  return r;
}

Result<SlotMap> ParseClusterShards(const Reply& reply, const HostPort& answered_by, bool tls) {
  if (reply.type != ReplyType::kArray) return BadShape("CLUSTER SHARDS", answered_by);
  SlotMap map;
  for (const Reply& shard : reply.elements) {
    const Reply* slots = Field(shard, "slots");
    const Reply* nodes = Field(shard, "nodes");
    if (slots == nullptr || nodes == nullptr || slots->elements.size() % 2 != 0) {
      return BadShape("CLUSTER SHARDS", answered_by);
    }
    if (slots->elements.empty()) continue;  // a master that lost its slots (failed over)
    const std::optional<HostPort> master = ShardMaster(*nodes, answered_by, tls);
    if (!master) continue;  // no known master: its slots stay unserved until the next refresh
    for (size_t i = 0; i < slots->elements.size(); i += 2) {
      map.Assign(static_cast<int>(slots->elements[i].integer),
                 static_cast<int>(slots->elements[i + 1].integer), *master);
    }
    map.SetReplicas(*master, ShardReplicas(*nodes, answered_by, tls));
  }
  return map;
}

Result<SlotMap> ParseClusterSlots(const Reply& reply, const HostPort& answered_by) {
  if (reply.type != ReplyType::kArray) return BadShape("CLUSTER SLOTS", answered_by);
  SlotMap map;
  for (const Reply& range : reply.elements) {
    if (range.elements.size() < 3 || range.elements[2].elements.size() < 2) {
      return BadShape("CLUSTER SLOTS", answered_by);
    }
    const Reply& master = range.elements[2];
    const auto addr =
        NodeAddress(TextOf(&master.elements[0]), master.elements[1].integer, answered_by);
    if (!addr) continue;
    map.Assign(static_cast<int>(range.elements[0].integer),
               static_cast<int>(range.elements[1].integer), *addr);
    // Then its replicas, each [host, port, id...]. CLUSTER SLOTS leaves out failed ones.
    std::vector<HostPort> replicas;
    for (size_t r = 3; r < range.elements.size(); ++r) {
      const Reply& replica = range.elements[r];
      if (replica.elements.size() < 2) continue;
      if (const auto raddr =
              NodeAddress(TextOf(&replica.elements[0]), replica.elements[1].integer, answered_by)) {
        replicas.push_back(*raddr);
      }
    }
    map.SetReplicas(*addr, replicas);
  }
  return map;
}

bool InfoSaysClusterEnabled(std::string_view info) {
  return info.find("cluster_enabled:1") != std::string_view::npos;
}

}  // namespace kvtier::tiers::remote
