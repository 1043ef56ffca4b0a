#include "tiers/remote/cluster_slots.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kvtier::tiers::remote {
namespace {

using resp::Reply;
using resp::ReplyType;

TEST(ClusterSlots, Crc16MatchesTheSpecificationVector) { EXPECT_EQ(Crc16("123456789"), 0x31C3); }

TEST(ClusterSlots, KeySlotsAgreeWithRedis) {
  // Values as `CLUSTER KEYSLOT` gives them.
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot(""), 0);
}

TEST(ClusterSlots, HashTagsAreHonoured) {
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("{user1000}.followers"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("foo{}{bar}"), Crc16("foo{}{bar}") % kSlotCount);  // empty tag: whole key
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot("foo{bar"), Crc16("foo{bar") % kSlotCount);  // no closing brace
}

// Redis does not bracket an IPv6 address in a redirect: the port follows the last colon.
TEST(ClusterSlots, ParsesARedirectToAnIpv6Node) {
  auto moved = ParseRedirect("MOVED 5 ::1:7000");
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->target.host, "::1");
  EXPECT_EQ(moved->target.port, 7000);
  EXPECT_EQ(moved->target.ToString(), "[::1]:7000");
  auto ask = ParseRedirect("ASK 5 fe80::2:6379");
  ASSERT_TRUE(ask);
  EXPECT_EQ(ask->target.host, "fe80::2");
}

TEST(ClusterSlots, ParsesMovedAndAskIncludingAnUnknownEndpoint) {
  auto moved = ParseRedirect("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->target.ToString(), "127.0.0.1:6381");
  auto ask = ParseRedirect("ASK 1 :7000");
  ASSERT_TRUE(ask);
  EXPECT_EQ(ask->kind, Redirect::Kind::kAsk);
  EXPECT_EQ(ask->target.host, "");
  EXPECT_EQ(ask->target.port, 7000);
  for (const char* bad : {"ERR x", "MOVED", "MOVED 16384 a:1", "MOVED x a:1", "ASK 1 a", "MOVED 1",
                          "MOVED 1 a:0", "MOVED 1 a:x"}) {
    EXPECT_FALSE(ParseRedirect(bad)) << bad;
  }
}

Reply Text(std::string s) { return Reply::Bulk(std::move(s)); }

Reply Node(std::string ip, int64_t port, std::string role, std::string health,
           std::string endpoint) {
  return Reply::Aggregate(
      ReplyType::kArray,
      {Text("id"), Text("x"), Text("port"), Reply::Integer(port), Text("ip"), Text(std::move(ip)),
       Text("endpoint"), Text(std::move(endpoint)), Text("role"), Text(std::move(role)),
       Text("health"), Text(std::move(health))});
}

Reply Shard(std::vector<Reply> slots, std::vector<Reply> nodes) {
  return Reply::Aggregate(ReplyType::kMap,
                          {Text("slots"), Reply::Aggregate(ReplyType::kArray, std::move(slots)),
                           Text("nodes"), Reply::Aggregate(ReplyType::kArray, std::move(nodes))});
}

TEST(ClusterSlots, ParsesClusterShardsPickingTheOnlineMaster) {
  const HostPort from{"10.0.0.9", 7000};
  const Reply reply = Reply::Aggregate(
      ReplyType::kArray,
      {Shard({Reply::Integer(0), Reply::Integer(99), Reply::Integer(200), Reply::Integer(16383)},
             {Node("10.0.0.1", 7001, "replica", "online", "10.0.0.1"),
              Node("10.0.0.6", 7006, "replica", "failed", "10.0.0.6"),
              Node("10.0.0.2", 7002, "master", "failed", "10.0.0.2"),
              Node("10.0.0.3", 7003, "master", "online", "")}),
       Shard({Reply::Integer(100), Reply::Integer(199)}, {Node("", 7004, "master", "online", "?")}),
       Shard({}, {Node("10.0.0.5", 7005, "master", "failed", "10.0.0.5")})});
  const Result<SlotMap> map = ParseClusterShards(reply, from);
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->NodeOf(0)->ToString(), "10.0.0.3:7003");  // endpoint empty: the ip
  EXPECT_EQ(map->NodeOf(16383)->ToString(), "10.0.0.3:7003");
  EXPECT_EQ(map->NodeOf(150)->ToString(), "10.0.0.9:7004");  // no ip either: who answered
  EXPECT_EQ(map->covered_slots(), kSlotCount);
  EXPECT_EQ(map->Masters().size(), 2u);  // replicas are not masters
  // The online replica of the first shard; none for the second.
  ASSERT_EQ(map->ReplicasOf(16383).size(), 1u);
  EXPECT_EQ(map->ReplicasOf(16383)[0].ToString(), "10.0.0.1:7001");
  EXPECT_TRUE(map->ReplicasOf(150).empty());
}

TEST(ClusterSlots, AMovedSlotForgetsTheReplicasOfItsOldMaster) {
  SlotMap map;
  map.Assign(0, 99, {"m", 1});
  map.SetReplicas({"m", 1}, {{"r", 2}, {"r", 3}});
  EXPECT_EQ(map.ReplicasOf(50).size(), 2u);
  map.Assign(50, 50, {"n", 4});
  EXPECT_TRUE(map.ReplicasOf(50).empty());
  EXPECT_EQ(map.ReplicasOf(49).size(), 2u);
  EXPECT_TRUE(map.ReplicasOf(100).empty());  // served by no node
}

TEST(ClusterSlots, NodesAreTheMastersThatServeASlotAndTheirReplicas) {
  SlotMap map;
  map.Assign(0, 99, {"m", 1});
  map.SetReplicas({"m", 1}, {{"r", 2}});
  map.Assign(100, 199, {"gone", 5});
  map.SetReplicas({"gone", 5}, {{"r", 6}});
  map.Assign(100, 199, {"n", 4});  // "gone" lost every slot: neither it nor its replica is named
  std::vector<HostPort> nodes = map.Nodes();
  std::sort(nodes.begin(), nodes.end());
  EXPECT_EQ(nodes, (std::vector<HostPort>{{"m", 1}, {"n", 4}, {"r", 2}}));
}

TEST(ClusterSlots, MapsWithTheSameRoutesAreTheSameWhateverTheNodeOrder) {
  // As two nodes of one cluster list its shards: the same routes, in another order.
  SlotMap a;
  a.Assign(0, 8191, {"m", 1});
  a.Assign(8192, kSlotCount - 1, {"n", 2});
  a.SetReplicas({"m", 1}, {{"r", 3}, {"r", 4}});
  SlotMap b;
  b.Assign(8192, kSlotCount - 1, {"n", 2});
  b.Assign(0, 8191, {"m", 1});
  b.SetReplicas({"m", 1}, {{"r", 4}, {"r", 3}});
  EXPECT_TRUE(a.SameRoutesAs(b));
  EXPECT_TRUE(b.SameRoutesAs(a));
  SlotMap moved = b;
  moved.Assign(5, 5, {"n", 2});
  EXPECT_FALSE(a.SameRoutesAs(moved));
  SlotMap replica_lost = b;
  replica_lost.SetReplicas({"m", 1}, {{"r", 4}});
  EXPECT_FALSE(a.SameRoutesAs(replica_lost));
  SlotMap unserved;
  unserved.Assign(0, 8191, {"m", 1});
  EXPECT_FALSE(a.SameRoutesAs(unserved));
  EXPECT_FALSE(unserved.SameRoutesAs(a));
}

TEST(ClusterSlots, ParsesClusterSlots) {
  const HostPort from{"h", 1};
  auto range = [](int64_t a, int64_t b, std::string host, int64_t port) {
    return Reply::Aggregate(
        ReplyType::kArray,
        {Reply::Integer(a), Reply::Integer(b),
         Reply::Aggregate(ReplyType::kArray, {Text(std::move(host)), Reply::Integer(port)})});
  };
  Reply with_replica = range(0, 8191, "a", 1);
  with_replica.elements.push_back(
      Reply::Aggregate(ReplyType::kArray, {Text("b"), Reply::Integer(3), Text("id")}));
  const Reply reply =
      Reply::Aggregate(ReplyType::kArray, {with_replica, range(8192, 16000, "", 2)});
  const Result<SlotMap> map = ParseClusterSlots(reply, from);
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->NodeOf(8191)->ToString(), "a:1");
  ASSERT_EQ(map->ReplicasOf(8191).size(), 1u);
  EXPECT_EQ(map->ReplicasOf(8191)[0].ToString(), "b:3");
  EXPECT_TRUE(map->ReplicasOf(8192).empty());
  EXPECT_EQ(map->NodeOf(8192)->ToString(), "h:2");
  EXPECT_EQ(map->NodeOf(16001), nullptr);
  EXPECT_EQ(map->covered_slots(), 16001);
}

TEST(ClusterSlots, MalformedTopologyRepliesAreDeviceErrors) {
  const HostPort from{"h", 1};
  EXPECT_EQ(ParseClusterShards(Reply::Integer(1), from).status().code(), StatusCode::kDeviceError);
  EXPECT_EQ(ParseClusterShards(Reply::Aggregate(ReplyType::kArray, {Reply::Integer(1)}), from)
                .status()
                .code(),
            StatusCode::kDeviceError);
  EXPECT_EQ(ParseClusterSlots(Reply::Aggregate(ReplyType::kArray, {Reply::Integer(1)}), from)
                .status()
                .code(),
            StatusCode::kDeviceError);
}

TEST(ClusterSlots, SingleNodeServesEverySlot) {
  const SlotMap map = SlotMap::SingleNode({"h", 1});
  EXPECT_EQ(map.covered_slots(), kSlotCount);
  EXPECT_EQ(map.NodeOf(12345)->ToString(), "h:1");
}

}  // namespace
}  // namespace kvtier::tiers::remote
