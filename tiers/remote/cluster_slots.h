// Redis Cluster's key space: which of the 16384 hash slots a key is in, which master serves each
// slot (SlotMap, read from CLUSTER SHARDS or CLUSTER SLOTS), and the MOVED/ASK redirections a node
// answers with when it does not serve a key.
//
// The slot of a key is CRC16 (XMODEM: polynomial 0x1021, initial value 0) of the key modulo 16384,
// or of its hash tag: the bytes between the first '{' and the first '}' after it, when there are
// any. kvtier's keys carry no tag (RemoteKey), so its blocks spread over every slot; tags are
// honoured so the map agrees with the cluster for any key.
//
// Pure values and functions; a SlotMap is not synchronised (the client's I/O thread owns it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/resp/reply.h"
#include "common/status.h"
#include "tiers/remote/redis_endpoint.h"

namespace kvtier::tiers::remote {

inline constexpr int kSlotCount = 16384;

// CRC16/XMODEM of `bytes`, as the cluster specification defines it ("123456789" -> 0x31C3).
uint16_t Crc16(std::string_view bytes);

// The hash slot of `key`, hash tags honoured.
int KeySlot(std::string_view key);

// Which master serves each slot, and the replicas of each master that were online when the map
// was read (reads go there while their master cannot answer).
class SlotMap {
 public:
  static constexpr uint16_t kNoNode = 0xFFFF;

  // Every slot on one node: a single server, not a cluster.
  static SlotMap SingleNode(HostPort node);

  // The master of `slot`, or nullptr when no node serves it (the cluster is incomplete).
  const HostPort* NodeOf(int slot) const;
  // Serves [first, last] from `node`. Out-of-range slots are ignored.
  void Assign(int first, int last, const HostPort& node);
  // The replicas of the master of `slot` (none when unknown, or when no node serves it).
  std::vector<HostPort> ReplicasOf(int slot) const;
  // Records `replicas` as those of `master`, replacing what was known of it.
  void SetReplicas(const HostPort& master, const std::vector<HostPort>& replicas);
  // Masters that serve at least one slot, each once.
  std::vector<HostPort> Masters() const;
  // The nodes the map names: the masters that serve at least one slot and their replicas, each
  // once. A node not among them (gone from the cluster, or a master that lost its slots) is one
  // that the client has no reason to keep connections to.
  std::vector<HostPort> Nodes() const;
  int covered_slots() const;
  bool empty() const { return nodes_.empty(); }
  // Whether both maps send every slot to the same master, and name the same replicas for each
  // master. The nodes' order, which depends on the node asked, does not matter.
  bool SameRoutesAs(const SlotMap& other) const;

 private:
  uint16_t IndexOf(const HostPort& node);

  std::vector<HostPort> nodes_;                  // never shrinks; indexed by slots_
  std::vector<std::vector<uint16_t>> replicas_;  // indexed like nodes_: each master's replicas
  // On the heap, not a 32 KiB std::array: maps are moved through Results and coroutine frames.
  std::vector<uint16_t> slots_ = std::vector<uint16_t>(kSlotCount, kNoNode);
};

// A MOVED or ASK error reply, parsed: "MOVED 3999 127.0.0.1:6381". An empty host ("MOVED 3999
// :6381", a node whose endpoint the cluster does not know) means the host of the node that
// answered, which the caller fills in.
struct Redirect {
  enum class Kind : uint8_t { kMoved, kAsk };
  Kind kind = Kind::kMoved;
  int slot = 0;
  HostPort target;
};

// nullopt when `error` (a Reply::str of an error reply) is not a well-formed MOVED or ASK.
std::optional<Redirect> ParseRedirect(std::string_view error);

// The map in a CLUSTER SHARDS reply (Redis 7+; RESP2 or RESP3), one master per shard: the node
// whose role is "master", the one with health "online" first; its replicas are the shard's nodes
// of role "replica" whose health is not "failed". A node's address is its "endpoint" (its "ip" when
// that is empty or "?"), or `answered_by`'s host when both are empty. kDeviceError when the reply
// does not have the documented shape.
// `tls`: the client connects over TLS, and takes each node's "tls-port" where it has one (CLUSTER
// SLOTS and redirections already name the TLS ports to a TLS client of a tls-cluster).
Result<SlotMap> ParseClusterShards(const resp::Reply& reply, const HostPort& answered_by,
                                   bool tls = false);

// The same from a CLUSTER SLOTS reply (Redis 3+): [first, last, [host, port, id...], replicas...].
Result<SlotMap> ParseClusterSlots(const resp::Reply& reply, const HostPort& answered_by);

// Whether an INFO reply's text says "cluster_enabled:1".
bool InfoSaysClusterEnabled(std::string_view info);

}  // namespace kvtier::tiers::remote
