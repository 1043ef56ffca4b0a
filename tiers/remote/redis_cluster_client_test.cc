// RedisClusterClient against a real Redis Cluster (3 masters, 3 replicas of Debian's redis-server
// on loopback ports): every slot, resharding (MOVED), migration (ASK), failover after SIGKILL,
// reads from a replica while its master is dead, a hung master (SIGSTOP: timeouts, then the
// breaker), and the whole cluster gone.
#include "tiers/remote/redis_cluster_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tiers/remote/remote_record.h"
#include "tiers/remote/testing/held_port.h"
#include "tiers/remote/testing/redis_cluster.h"
#include "tiers/remote/testing/test_tls.h"
#include "tiers/remote/testing/test_values.h"

namespace kvtier::tiers::remote {
namespace {

using std::chrono::milliseconds;
using testing::RedisCluster;
using testing::TestKey;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTtl{600'000};
constexpr milliseconds kCallTimeout{5'000};
// How long the cluster may take to replicate, converge or learn of its replicas: they return as
// soon as it has; the bound only matters on a machine whose disk is busy (each node fsyncs its
// nodes.conf on every change), where 10 s once did not suffice.
constexpr milliseconds kClusterSettles{30'000};

std::unique_ptr<RedisCluster> StartCluster(RedisCluster::Options options = {}) {
  auto cluster = RedisCluster::Start(options);
  if (!cluster.ok()) {
    ADD_FAILURE() << "cluster: " << cluster.status().ToString();
    return nullptr;
  }
  return std::move(cluster).value();
}

// A short connect timeout by default: the failure tests bound how long a dead node can hold a call.
std::unique_ptr<RedisClusterClient> OpenClient(std::vector<HostPort> seeds,
                                               RedisClusterOptions options = {},
                                               milliseconds connect_timeout = milliseconds(300)) {
  options.seeds = std::move(seeds);
  options.connect_timeout = connect_timeout;
  auto client = RedisClusterClient::Open(std::move(options));
  if (!client.ok()) {
    ADD_FAILURE() << "open: " << client.status().ToString();
    return nullptr;
  }
  return std::move(client).value();
}

// Options whose lookups ask a replica first (lookups_on_replicas; off by default).
RedisClusterOptions ReplicasFirst(RedisClusterOptions options = {}) {
  options.lookups_on_replicas = true;
  return options;
}

// The first `n` answers of an Exists call found their key.
void ExpectFound(const std::vector<Status>& found, size_t n) {
  ASSERT_GE(found.size(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(found[i].ok()) << i << ": " << found[i].ToString();
}

// Writes the records of `blocks` (payloads of `bytes`) in one call; every key must succeed.
void PutBlocks(RemoteStore& store, const std::vector<uint64_t>& blocks, size_t bytes) {
  std::vector<std::string> values;  // borrowed by the writes until Set returns
  for (const uint64_t i : blocks) values.push_back(testing::TestRecord(i, bytes));
  std::vector<RemoteWrite> writes;
  for (size_t n = 0; n < blocks.size(); ++n) writes.push_back({TestKey(blocks[n]), {values[n]}});
  const std::vector<Status> put = store.Set(std::move(writes), kTtl, kCallTimeout);
  for (size_t n = 0; n < put.size(); ++n)
    ASSERT_TRUE(put[n].ok()) << n << ": " << put[n].ToString();
}

// Reads `blocks` in one call and checks every record against its block.
void ExpectBlocks(RemoteStore& store, const std::vector<uint64_t>& blocks, size_t bytes) {
  std::vector<std::string> keys;
  for (const uint64_t i : blocks) keys.push_back(TestKey(i));
  const auto got = store.Get(std::move(keys), kCallTimeout);
  ASSERT_EQ(got.size(), blocks.size());
  for (size_t n = 0; n < blocks.size(); ++n) {
    ASSERT_TRUE(got[n].ok()) << "block " << blocks[n] << ": " << got[n].status().ToString();
    const auto view =
        DecodeRecord(*got[n], testing::TestNamespace(), testing::TestBlock(blocks[n]));
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    ASSERT_EQ(view->payload.size(), bytes);
    ASSERT_EQ(*got[n], testing::TestRecord(blocks[n], bytes));
  }
}

// Blocks 0..299 (256-byte payloads), once every replica has them.
std::vector<uint64_t> PutReplicatedBlocks(RedisCluster& cluster, RemoteStore& store) {
  std::vector<uint64_t> blocks;
  for (uint64_t i = 0; i < 300; ++i) blocks.push_back(i);
  PutBlocks(store, blocks, 256);
  EXPECT_TRUE(cluster.WaitReplicated(kClusterSettles));
  return blocks;
}

// How many EXISTS node `n` has served (INFO commandstats).
uint64_t ExistsCallsAt(RedisCluster& cluster, size_t n) {
  const Result<std::string> info = cluster.Cli(n, {"INFO", "commandstats"});
  if (!info.ok()) {
    ADD_FAILURE() << info.status().ToString();
    return 0;
  }
  const std::string field = "cmdstat_exists:calls=";
  const size_t at = info->find(field);
  return at == std::string::npos ? 0 : std::stoull(info->substr(at + field.size()));
}

// The map read at Open may predate the replicas' joining (the periodic refresh would find them):
// once every node's view of the shards names the three replicas, reads it again.
void RefreshOnceReplicasAreKnown(RedisCluster& cluster, RedisClusterClient& client) {
  ASSERT_TRUE(testing::PollUntil(kClusterSettles, [&] {
    for (size_t n = 0; n < cluster.nodes().size(); ++n) {
      const Result<std::string> shards = cluster.Cli(n, {"CLUSTER", "SHARDS"});
      size_t replicas = 0;
      for (size_t at = 0;
           shards.ok() && (at = shards->find("\nreplica\n", at)) != std::string::npos; ++at) {
        ++replicas;
      }
      if (replicas != 3) return false;
    }
    return true;
  }));
  ASSERT_TRUE(client.RefreshTopology().ok());
}

TEST(RedisClusterClient, RoundTripOverEverySlotFromOneSeed) {
  auto cluster = StartCluster();
  ASSERT_TRUE(cluster);
  // One seed is enough: the rest of the cluster is discovered. The connects to the other masters
  // are made while the I/O thread encodes thousands of SETs for the first (slow under ASan): not
  // a test of how long a dead node may hold a call, so the production default's connect timeout.
  auto client = OpenClient({cluster->node(0).address()}, {}, milliseconds(1000));
  ASSERT_TRUE(client);
  EXPECT_TRUE(client->cluster_mode());
  EXPECT_EQ(client->Masters().size(), 3u);

  const std::vector<uint64_t> blocks = testing::BlocksCoveringEverySlot();
  PutBlocks(*client, blocks, 64);
  ExpectBlocks(*client, blocks, 64);
  for (size_t m = 0; m < 3; ++m) {
    const auto size = cluster->Cli(m, {"DBSIZE"});
    ASSERT_TRUE(size.ok());
    EXPECT_GT(std::stoi(*size), 5000) << "master " << m;
  }
  // Deleted keys are misses; kept ones still exist.
  const std::vector<std::string> some = {TestKey(blocks[0]), TestKey(blocks[9000])};
  for (const Status& st : client->Delete(some, kCallTimeout)) EXPECT_TRUE(st.ok()) << st.ToString();
  for (const Status& st : client->Delete(some, kCallTimeout))
    EXPECT_EQ(st.code(), StatusCode::kNotFound);
  const auto after = client->Get(some, kCallTimeout);
  EXPECT_EQ(after[0].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->Exists({TestKey(blocks[1])}, kCallTimeout)[0], Status::Ok());

  const RemoteStats stats = client->stats();
  EXPECT_EQ(stats.hits, blocks.size());
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.moved_redirects, 0u);
  EXPECT_EQ(stats.masters, 3u);
  EXPECT_GT(stats.bytes_out, blocks.size() * 64);
}

// docs/scale-out.md's ACL user, and the same without READONLY (which every cluster connection
// sends, and which that user once lacked): the masters serve both users' reads and writes, so
// the refusal must not fail the connection.
TEST(RedisClusterClient, TheDocumentedAclUserAndOneWithoutReadonlyReadAndWrite) {
  auto cluster = StartCluster();
  ASSERT_TRUE(cluster);
  const std::vector<std::string> documented = {
      "on",    ">s3cret", "resetkeys", "~kvt1:*",         "resetchannels",
      "-@all", "+get",    "+set",      "+exists",         "+ping",
      "+info", "+asking", "+readonly", "+cluster|shards", "+cluster|slots"};
  std::vector<std::string> without_readonly = documented;
  std::erase(without_readonly, "+readonly");
  for (const auto& [name, rules] :
       {std::pair{"kvtier", documented}, {"no-readonly", without_readonly}}) {
    for (size_t n = 0; n < cluster->nodes().size(); ++n) {
      std::vector<std::string> args = {"ACL", "SETUSER", name};
      args.insert(args.end(), rules.begin(), rules.end());
      const Result<std::string> user = cluster->Cli(n, args);
      ASSERT_TRUE(user.ok()) << user.status().ToString();
    }
  }
  uint64_t first = 0;
  for (const char* name : {"kvtier", "no-readonly"}) {
    SCOPED_TRACE(name);
    RedisClusterOptions options;
    options.user = name;
    options.password = "s3cret";
    auto client = OpenClient({cluster->node(0).address()}, options);
    ASSERT_TRUE(client);
    std::vector<uint64_t> blocks;
    for (uint64_t i = first; i < first + 200; ++i) blocks.push_back(i);
    first += 200;
    PutBlocks(*client, blocks, 64);
    ExpectBlocks(*client, blocks, 64);
    ExpectFound(client->Exists({TestKey(blocks[0]), TestKey(blocks[199])}, kCallTimeout), 2);
    EXPECT_EQ(client->stats().breaker_openings, 0u);
  }
}

TEST(RedisClusterClient, ATlsClusterIsReachedOnItsTlsPortsFromOneSeed) {
  testing::TempDir certificates_dir;
  const auto certificates = testing::MakeTestCertificates(certificates_dir.path());
  ASSERT_TRUE(certificates.ok()) << certificates.status().ToString();
  auto cluster = StartCluster({.tls = &*certificates});
  ASSERT_TRUE(cluster);
  RedisClusterOptions options = ReplicasFirst();
  options.tls.enabled = true;
  options.tls.ca_file = certificates->ca_file;
  // One TLS seed: the slot map names every node by its "tls-port".
  // A TLS handshake (inside the connect timeout) under a sanitizer on a loaded machine can take
  // longer than the other tests' 300 ms: one timed out in CI while the pool opened a connection.
  auto client = OpenClient({cluster->TlsSeeds()[0]}, options, milliseconds(5000));
  ASSERT_TRUE(client);
  EXPECT_TRUE(client->cluster_mode());
  std::vector<std::string> masters;
  for (size_t m = 0; m < 3; ++m) masters.push_back(cluster->TlsSeeds()[m].ToString());
  std::sort(masters.begin(), masters.end());
  EXPECT_EQ(client->Masters(), masters);

  const std::vector<uint64_t> blocks = testing::BlocksCoveringEverySlot();
  PutBlocks(*client, blocks, 64);
  ExpectBlocks(*client, blocks, 64);
  PutBlocks(*client, {1, 2}, 2 << 20);  // large values, read in place through TLS
  ExpectBlocks(*client, {1, 2}, 2 << 20);
  // Lookups at the replicas, over TLS too.
  ASSERT_TRUE(cluster->WaitReplicated(kClusterSettles));
  RefreshOnceReplicasAreKnown(*cluster, *client);
  std::vector<std::string> keys;
  for (size_t n = 0; n < 100; ++n) keys.push_back(TestKey(blocks[n]));
  ExpectFound(client->Exists(keys, kCallTimeout), keys.size());
  EXPECT_EQ(client->stats().replica_lookups, keys.size());
  EXPECT_EQ(client->stats().replica_lookup_fallbacks, 0u);
}

TEST(RedisClusterClient, LargeValuesRoundTrip) {
  auto cluster = StartCluster({.masters = 3, .replicas_per_master = 0});
  ASSERT_TRUE(cluster);
  auto client = OpenClient(cluster->Seeds());
  ASSERT_TRUE(client);
  const std::vector<uint64_t> blocks = {1, 2, 3, 4, 5, 6};
  PutBlocks(*client, blocks, 2 << 20);  // a Llama-8B block of 16 tokens
  ExpectBlocks(*client, blocks, 2 << 20);
}

TEST(RedisClusterClient, FollowsMovedAfterASlotIsResharded) {
  auto cluster = StartCluster({.masters = 3, .replicas_per_master = 0});
  ASSERT_TRUE(cluster);
  // No re-read of the slot map during the test, so that the correction checked below is the one
  // the MOVED answer made, not a refresh that happened to land first.
  RedisClusterOptions options;
  options.min_refresh_interval = milliseconds(600'000);
  auto client = OpenClient(cluster->Seeds(), options);
  ASSERT_TRUE(client);
  PutBlocks(*client, {7}, 128);
  const int slot = KeySlot(TestKey(7));
  const int from = cluster->MasterOfSlot(slot);
  const size_t to = static_cast<size_t>((from + 1) % 3);
  ASSERT_TRUE(cluster->MoveSlot(slot, to).ok());
  ASSERT_TRUE(cluster->WaitConverged(kClusterSettles, slot, static_cast<int>(to)));

  ExpectBlocks(*client, {7}, 128);
  EXPECT_GE(client->stats().moved_redirects, 1u);
  // The map was corrected: the next call goes straight to the new master.
  const uint64_t moved = client->stats().moved_redirects;
  ExpectBlocks(*client, {7}, 128);
  EXPECT_EQ(client->stats().moved_redirects, moved);
}

TEST(RedisClusterClient, FollowsAskDuringAMigration) {
  auto cluster = StartCluster({.masters = 3, .replicas_per_master = 0});
  ASSERT_TRUE(cluster);
  auto client = OpenClient(cluster->Seeds());
  ASSERT_TRUE(client);
  // Three keys of one slot (a hash tag; the client honours it like Redis does).
  const std::string a = "{mig}a", b = "{mig}b", c = "{mig}c";
  ASSERT_TRUE(client->Set({{a, {"value-a"}}, {b, {"value-b"}}}, kTtl, kCallTimeout)[0].ok());
  const int slot = KeySlot(a);
  const int from = cluster->MasterOfSlot(slot);
  const size_t to = static_cast<size_t>((from + 1) % 3);
  ASSERT_TRUE(cluster->BeginMigration(slot, to, {a}).ok());

  const auto got = client->Get({a, b}, kCallTimeout);
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_EQ(*got[0], "value-a");  // moved: ASK, then ASKING + GET on the importing node
  ASSERT_TRUE(got[1].ok()) << got[1].status().ToString();
  EXPECT_EQ(*got[1], "value-b");  // not moved yet: the old master serves it
  EXPECT_GE(client->stats().ask_redirects, 1u);
  // A new key of a migrating slot is created on the importing node.
  EXPECT_TRUE(client->Set({{c, {"value-c"}}}, kTtl, kCallTimeout)[0].ok());
  EXPECT_EQ(client->Exists({c}, kCallTimeout)[0], Status::Ok());
  // ASK changes nothing for good.
  EXPECT_EQ(client->stats().moved_redirects, 0u);
}

TEST(RedisClusterClient, AReadWhoseAskTargetFailsIsAnsweredAtOnceWithoutAskingThatNodeAgain) {
  // The importing node of a migrating slot is lost: the old master answers ASK for a key it has
  // handed over, and the importing node cannot answer. The key is neither on the old master nor
  // on its replicas (the master said so), and the importing node's replicas would send the read
  // back to the slot's master: the read fails there and then (a miss for the caller), instead of
  // going to the lost node again and waiting there for the rest of the call's time.
  auto cluster = StartCluster({.node_timeout = milliseconds(60000)});
  ASSERT_TRUE(cluster);
  auto client = OpenClient(cluster->Seeds());
  ASSERT_TRUE(client);
  RefreshOnceReplicasAreKnown(*cluster, *client);  // the old master's replica is in the map
  const std::string a = "{ask}a";
  ASSERT_TRUE(client->Set({{a, {"value-a"}}}, kTtl, kCallTimeout)[0].ok());
  const int slot = KeySlot(a);
  const size_t to = static_cast<size_t>((cluster->MasterOfSlot(slot) + 1) % 3);
  ASSERT_TRUE(cluster->BeginMigration(slot, to, {a}).ok());
  cluster->node(to).Kill();
  auto held = testing::HeldPort::Open(cluster->node(to).port());
  ASSERT_TRUE(held.ok()) << held.status().ToString();

  Result<std::string> got = Internal("not read");
  std::thread call([&] { got = client->Get({a}, kCallTimeout)[0]; });
  const bool out = (*held)->WaitForGet(milliseconds(5000));
  (*held)->Release();  // the importing node's connection drops with the call on it
  call.join();
  ASSERT_TRUE(out) << "the call never reached the importing node's port";
  EXPECT_EQ(got.status().code(), StatusCode::kDeviceError) << got.status().ToString();
  EXPECT_EQ((*held)->gets_held(), 1u) << "the lost importing node was asked again";
  EXPECT_EQ(client->stats().ask_redirects, 1u);
  EXPECT_EQ(client->stats().replica_reads, 0u);
}

// The node timeout of the failover tests: long enough that the cluster does not fail a killed
// master over on its own before the test asks, short enough that it does when the test's forced
// election does not end.
constexpr milliseconds kFailoverNodeTimeout{2000};

// Promotes `replica` (of a killed master) and waits until every running node says it serves
// `slot`. FORCE skips the handshake with the dead master and asks the surviving masters for their
// votes. Its answer is not checked: on a loaded machine the forced election may run out of time,
// or the cluster may have failed over on its own first (FORCE is then refused: the node is a
// master already); either way the node timeout's own failover completes within the wait.
void FailOverTo(RedisCluster& cluster, int replica, int slot) {
  (void)cluster.Cli(static_cast<size_t>(replica), {"CLUSTER", "FAILOVER", "FORCE"});
  ASSERT_TRUE(cluster.WaitConverged(milliseconds(20000), slot, replica));
}

// Key 0's slot, its master and that master's replica, once the master has been killed.
struct KilledMaster {
  int slot = -1;
  int victim = -1;
  int replica = -1;
};
void KillMasterOfKey0(RedisCluster& cluster, KilledMaster* killed) {
  killed->slot = KeySlot(TestKey(0));
  killed->victim = cluster.MasterOfSlot(killed->slot);
  killed->replica = cluster.ReplicaOf(static_cast<size_t>(killed->victim));
  ASSERT_GE(killed->replica, 0);
  cluster.node(static_cast<size_t>(killed->victim)).Kill();
}

TEST(RedisClusterClient, FollowsFailoverAfterAMasterIsKilled) {
  auto cluster = StartCluster({.node_timeout = kFailoverNodeTimeout});
  ASSERT_TRUE(cluster);
  auto client = OpenClient(cluster->Seeds());
  ASSERT_TRUE(client);
  const std::vector<uint64_t> blocks = PutReplicatedBlocks(*cluster, *client);

  KilledMaster killed;
  ASSERT_NO_FATAL_FAILURE(KillMasterOfKey0(*cluster, &killed));
  const auto [slot, victim, replica] = killed;
  ASSERT_NO_FATAL_FAILURE(FailOverTo(*cluster, replica, slot));

  // Until the client has re-read the map, a call goes to the dead master first (then to its
  // replica, the new master), each within its timeout; then straight to the new master.
  const milliseconds timeout{500};
  milliseconds slowest{0};
  const bool served = testing::PollUntil(milliseconds(10000), [&] {
    const auto start = Clock::now();
    const auto got = client->Get({TestKey(0)}, timeout);
    slowest = std::max(slowest, std::chrono::duration_cast<milliseconds>(Clock::now() - start));
    return got[0].ok();
  });
  ASSERT_TRUE(served);
  // No call hangs: at most two attempts (the dead master, then the new one), each bounded by the
  // timeout. The slack is for a loaded test machine (CI runs the redis tests beside others); the
  // bound only has to tell "bounded" from "waits for the dead node's TCP timeout".
  EXPECT_LT(slowest, 2 * timeout + milliseconds(2000)) << slowest.count() << " ms";
  ExpectBlocks(*client, blocks, 256);  // every block survived: the replica had them all
  EXPECT_GE(client->stats().topology_refreshes, 2u);
}

// A master lost with no replica to take over: every call to its slots fails and asks for the
// map again, which stays the same. The reads must space out (each a new connection to the
// cluster) rather than run ten times a second for as long as the master is gone.
TEST(RedisClusterClient, AMasterLostForGoodDoesNotKeepTheMapBeingReadTenTimesASecond) {
  RedisCluster::Options options;
  options.replicas_per_master = 0;
  options.node_timeout = milliseconds(60'000);  // the cluster keeps the dead master's slots
  auto cluster = StartCluster(options);
  ASSERT_TRUE(cluster);
  auto client = OpenClient(cluster->Seeds());
  ASSERT_TRUE(client);
  const int slot = KeySlot(TestKey(0));
  cluster->node(static_cast<size_t>(cluster->MasterOfSlot(slot))).Kill();
  const uint64_t before = client->stats().topology_refreshes;
  const auto until = Clock::now() + milliseconds(3000);
  while (Clock::now() < until) {
    EXPECT_FALSE(client->Get({TestKey(0)}, milliseconds(200))[0].ok());
    std::this_thread::sleep_for(milliseconds(20));
  }
  const uint64_t reads = client->stats().topology_refreshes - before;
  // 100, 200, 400, 800 ms, then one a second: about 6 in 3 s (30 without the spacing).
  EXPECT_LE(reads, 10u) << reads << " slot-map reads in 3 s";
  EXPECT_GE(reads, 2u);
}

TEST(RedisClusterClient, ACallOutWhenTheMapMovesItsSlotGoesToTheNewMaster) {
  // A call sent to a dead master by the old map fails there after another call's refresh has
  // installed the new one: the key goes to the promoted replica, now the slot's master, instead
  // of failing (the old map's replica of the dead master is the new map's master).
  auto cluster = StartCluster({.node_timeout = kFailoverNodeTimeout});
  ASSERT_TRUE(cluster);
  auto client = OpenClient(cluster->Seeds());
  ASSERT_TRUE(client);
  PutReplicatedBlocks(*cluster, *client);
  KilledMaster killed;
  ASSERT_NO_FATAL_FAILURE(KillMasterOfKey0(*cluster, &killed));
  const auto [slot, victim, replica] = killed;
  auto held = testing::HeldPort::Open(cluster->node(static_cast<size_t>(victim)).port());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  // A client that read the map before the failover, and has no connection to the dead master.
  auto stale = OpenClient(cluster->Seeds());
  ASSERT_TRUE(stale);
  ASSERT_NO_FATAL_FAILURE(FailOverTo(*cluster, replica, slot));

  Result<std::string> got = DeviceError("not read");
  std::thread call([&] { got = stale->Get({TestKey(0)}, kCallTimeout)[0]; });
  const bool out = (*held)->WaitForGet(milliseconds(5000));
  // The map changes while the call is out at the old master's port; then that port closes it.
  const Status refreshed = stale->RefreshTopology();
  (*held)->Release();
  call.join();
  ASSERT_TRUE(out) << "the call never reached the dead master's port";
  ASSERT_TRUE(refreshed.ok()) << refreshed.ToString();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, testing::TestRecord(0, 256));
  EXPECT_EQ(stale->stats().new_owner_resends, 1u);
}

TEST(RedisClusterClient, ANodeTheMapNoLongerNamesHasItsConnectionsClosedOnceItsCallsEnd) {
  // A failover leaves the killed master out of the map; a listener at its port stands for a node
  // that left the cluster but still answers. A connection to it that is idle when the new map is
  // read is closed then; one with a call out is closed when that call ends, with the answer it got
  // there (the call is not cut and sent elsewhere). Kept, they would stay open for as long as the
  // client runs.
  auto cluster = StartCluster({.node_timeout = kFailoverNodeTimeout});
  ASSERT_TRUE(cluster);
  // A replica that has never synced with its master is not elected in its place.
  ASSERT_TRUE(cluster->WaitReplicated(kClusterSettles));
  KilledMaster killed;
  ASSERT_NO_FATAL_FAILURE(KillMasterOfKey0(*cluster, &killed));
  const auto [slot, victim, replica] = killed;
  auto held = testing::HeldPort::Open(cluster->node(static_cast<size_t>(victim)).port());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  // Two clients that read the map before the failover.
  auto idle = OpenClient(cluster->Seeds());
  ASSERT_TRUE(idle);
  auto busy = OpenClient(cluster->Seeds());
  ASSERT_TRUE(busy);
  ASSERT_NO_FATAL_FAILURE(FailOverTo(*cluster, replica, slot));
  const std::string answer = "$12\r\nfrom-the-old\r\n";

  // A call answered at the old master's port leaves its connection idle in the pool.
  Result<std::string> got = Internal("not read");
  std::thread call([&] { got = idle->Get({TestKey(0)}, kCallTimeout)[0]; });
  ASSERT_TRUE((*held)->WaitForGet(milliseconds(5000)));
  (*held)->Answer(answer);
  call.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(*got, "from-the-old");
  ASSERT_TRUE(idle->RefreshTopology().ok());
  EXPECT_TRUE(testing::PollUntil(milliseconds(5000), [&] { return (*held)->HeldClosedByClient(); }))
      << "the idle connection to a node the map no longer names is still open";
  (*held)->Release();

  // The map changes while a call is out at the old master's port.
  call = std::thread([&] { got = busy->Get({TestKey(0)}, kCallTimeout)[0]; });
  ASSERT_TRUE((*held)->WaitForGet(milliseconds(5000)));
  ASSERT_TRUE(busy->RefreshTopology().ok());
  (*held)->Answer(answer);
  call.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "from-the-old");
  EXPECT_TRUE(testing::PollUntil(milliseconds(5000), [&] { return (*held)->HeldClosedByClient(); }))
      << "the connection of a call that ended on a node the map no longer names is still open";
  // Calls now go to the new master.
  EXPECT_EQ(busy->Get({TestKey(0)}, kCallTimeout)[0].status().code(), StatusCode::kNotFound);
}

TEST(RedisClusterClient, AMasterReplacedByAFailoverNoLongerCountsAsAnOpenBreaker) {
  // The killed master's breaker opens; once the map names its replica instead, nothing will ever
  // probe it again, and the gauge of open breakers must not count it for as long as the client
  // runs.
  auto cluster = StartCluster({.node_timeout = kFailoverNodeTimeout});
  ASSERT_TRUE(cluster);
  ASSERT_TRUE(cluster->WaitReplicated(kClusterSettles));
  RedisClusterOptions options;
  options.breaker = {.failure_threshold = 1,
                     .initial_backoff = milliseconds(60'000),
                     .max_backoff = milliseconds(60'000)};
  auto client = OpenClient(cluster->Seeds(), options);
  ASSERT_TRUE(client);
  KilledMaster killed;
  ASSERT_NO_FATAL_FAILURE(KillMasterOfKey0(*cluster, &killed));
  const auto [slot, victim, replica] = killed;
  (void)client->Get({TestKey(0)}, kCallTimeout);  // refused by the killed master
  ASSERT_EQ(client->stats().open_breakers, 1u);
  ASSERT_NO_FATAL_FAILURE(FailOverTo(*cluster, replica, slot));
  ASSERT_TRUE(client->RefreshTopology().ok());
  EXPECT_EQ(client->stats().open_breakers, 0u);
}

TEST(RedisClusterClient, AKilledMastersBlocksAreReadFromItsReplicaBeforeAnyFailover) {
  // A long node timeout: nothing is failed over during the test; the replica stays a replica.
  auto cluster = StartCluster({.node_timeout = milliseconds(60000)});
  ASSERT_TRUE(cluster);
  auto client = OpenClient(cluster->Seeds());
  ASSERT_TRUE(client);
  const std::vector<uint64_t> blocks = PutReplicatedBlocks(*cluster, *client);
  RefreshOnceReplicasAreKnown(*cluster, *client);

  const int victim = cluster->MasterOfSlot(KeySlot(TestKey(0)));
  cluster->node(static_cast<size_t>(victim)).Kill();
  // Every block is still read, the victim's from its replica, within one call's time.
  ExpectBlocks(*client, blocks, 256);
  EXPECT_EQ(client->Exists({TestKey(0)}, kCallTimeout)[0], Status::Ok());
  EXPECT_GT(client->stats().replica_reads, 0u);
  // Writes are not redirected to a replica: they fail until a failover.
  std::string record = testing::TestRecord(0, 256);
  const std::vector<Status> put =
      client->Set({RemoteWrite{TestKey(0), {record}}}, kTtl, milliseconds(500));
  EXPECT_FALSE(put[0].ok());
}

TEST(RedisClusterClient, LookupsAskAReplicaFirstAndTheMasterWhenTheReplicaIsDown) {
  // A long node timeout: the killed replica is not replaced during the test.
  auto cluster = StartCluster({.node_timeout = milliseconds(60000)});
  ASSERT_TRUE(cluster);
  auto client = OpenClient(cluster->Seeds(), ReplicasFirst());
  ASSERT_TRUE(client);
  const std::vector<uint64_t> blocks = PutReplicatedBlocks(*cluster, *client);
  RefreshOnceReplicasAreKnown(*cluster, *client);
  std::vector<std::string> keys;
  for (const uint64_t i : blocks) keys.push_back(TestKey(i));
  keys.push_back(TestKey(100'000));  // never written: a miss at the replica is a miss

  std::vector<Status> found = client->Exists(keys, kCallTimeout);
  ExpectFound(found, blocks.size());
  EXPECT_EQ(found.back().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->stats().replica_lookups, keys.size());
  // The replicas answered every key; the masters were asked nothing.
  uint64_t at_masters = 0, at_replicas = 0;
  for (size_t n = 0; n < cluster->nodes().size(); ++n) {
    const Result<std::string> role = cluster->Cli(n, {"ROLE"});
    ASSERT_TRUE(role.ok()) << role.status().ToString();
    (role->rfind("master", 0) == 0 ? at_masters : at_replicas) += ExistsCallsAt(*cluster, n);
  }
  EXPECT_EQ(at_masters, 0u);
  EXPECT_EQ(at_replicas, keys.size());
  // Only lookups: reads still go to the masters.
  ExpectBlocks(*client, blocks, 256);
  EXPECT_EQ(client->stats().replica_lookups, keys.size());

  // The replica of block 0's master killed: its lookups go to the master instead, in the same
  // call, and every block is still found.
  const int master = cluster->MasterOfSlot(KeySlot(TestKey(0)));
  const int replica = cluster->ReplicaOf(static_cast<size_t>(master));
  ASSERT_GE(replica, 0);
  cluster->node(static_cast<size_t>(replica)).Kill();
  found = client->Exists(keys, kCallTimeout);
  ExpectFound(found, blocks.size());
  EXPECT_EQ(found.back().code(), StatusCode::kNotFound);

  // Off (the default): lookups ask the masters only.
  auto plain = OpenClient(cluster->Seeds());
  ASSERT_TRUE(plain);
  ExpectFound(plain->Exists(keys, kCallTimeout), blocks.size());
  EXPECT_EQ(plain->stats().replica_lookups, 0u);
}

TEST(RedisClusterClient, AHungReplicasLookupsGoToItsMasterThenBackToItOnceItAnswers) {
  // A long node timeout: the stopped replica is not failed.
  auto cluster = StartCluster({.node_timeout = milliseconds(60000)});
  ASSERT_TRUE(cluster);
  RedisClusterOptions options = ReplicasFirst();
  options.breaker = {.failure_threshold = 2,
                     .initial_backoff = milliseconds(300),
                     .max_backoff = milliseconds(300)};
  auto client = OpenClient(cluster->Seeds(), options);
  ASSERT_TRUE(client);
  PutReplicatedBlocks(*cluster, *client);
  RefreshOnceReplicasAreKnown(*cluster, *client);
  const int master = cluster->MasterOfSlot(KeySlot(TestKey(0)));
  const int replica = cluster->ReplicaOf(static_cast<size_t>(master));
  ASSERT_GE(replica, 0);

  cluster->node(static_cast<size_t>(replica)).Stop();
  const milliseconds timeout{400};
  // The replica has half of each call's time; then its master answers, within the call's time.
  for (int call = 0; call < 2; ++call) {
    const auto start = Clock::now();
    EXPECT_EQ(client->Exists({TestKey(0)}, timeout)[0], Status::Ok()) << call;
    EXPECT_GE(Clock::now() - start, timeout / 2 - milliseconds(5));
    EXPECT_LT(Clock::now() - start, timeout + milliseconds(500));
  }
  EXPECT_EQ(client->stats().replica_lookup_fallbacks, 2u);
  // Its breaker is open: lookups go straight to the master.
  const uint64_t asked = client->stats().replica_lookups;
  EXPECT_EQ(client->Exists({TestKey(0)}, timeout)[0], Status::Ok());
  EXPECT_EQ(client->stats().replica_lookups, asked);
  EXPECT_EQ(client->stats().replica_lookup_fallbacks, 2u);

  // Once it answers again, a lookup past the breaker's backoff probes it and the lookups are
  // its own again, without falling back.
  cluster->node(static_cast<size_t>(replica)).Continue();
  ASSERT_TRUE(testing::PollUntil(milliseconds(5000), [&] {
    const RemoteStats before = client->stats();
    const bool found = client->Exists({TestKey(0)}, timeout)[0].ok();
    const RemoteStats after = client->stats();
    return found && after.replica_lookups == before.replica_lookups + 1 &&
           after.replica_lookup_fallbacks == before.replica_lookup_fallbacks;
  }));
  EXPECT_EQ(client->stats().open_breakers, 0u);
}

TEST(RedisClusterClient, ABlockALookupFoundSurvivesAFailoverThatLosesUnreplicatedWrites) {
  // Failovers are forced below; nothing is failed over on its own.
  auto cluster = StartCluster({.node_timeout = milliseconds(60000)});
  ASSERT_TRUE(cluster);
  auto replicas_first = OpenClient(cluster->Seeds(), ReplicasFirst());
  ASSERT_TRUE(replicas_first);
  auto masters_only = OpenClient(cluster->Seeds());
  ASSERT_TRUE(masters_only);
  const std::vector<uint64_t> blocks = PutReplicatedBlocks(*cluster, *replicas_first);
  RefreshOnceReplicasAreKnown(*cluster, *replicas_first);

  // Block 0's master acknowledges a write its replica never receives: the replica's link is cut
  // and it cannot sync again (it now offers its master a password the master does not have), and
  // the master dies with the write. This is the window of asynchronous replication, held open.
  const int slot = KeySlot(TestKey(0));
  const auto master = static_cast<size_t>(cluster->MasterOfSlot(slot));
  const int replica = cluster->ReplicaOf(master);
  ASSERT_GE(replica, 0);
  const auto r = static_cast<size_t>(replica);
  ASSERT_TRUE(cluster->Cli(r, {"CONFIG", "SET", "masterauth", "not-the-masters"}).ok());
  ASSERT_TRUE(cluster->Cli(master, {"CLIENT", "KILL", "TYPE", "replica"}).ok());
  ASSERT_TRUE(testing::PollUntil(milliseconds(5000), [&] {
    const Result<std::string> info = cluster->Cli(r, {"INFO", "replication"});
    return info.ok() && info->find("master_link_status:down") != std::string::npos;
  }));
  uint64_t fresh = 1'000'000;
  while (KeySlot(TestKey(fresh)) != slot) ++fresh;
  PutBlocks(*masters_only, {fresh}, 256);
  // Past the replica's next attempt to sync (once a second), which its password makes fail.
  std::this_thread::sleep_for(milliseconds(1500));
  const Result<std::string> link = cluster->Cli(r, {"INFO", "replication"});
  ASSERT_TRUE(link.ok() && link->find("master_link_status:down") != std::string::npos);

  // A lookup at the master finds it; one that asks the replica does not (the replica answers from
  // what it has: a miss, not a fallback to the master).
  EXPECT_EQ(masters_only->Exists({TestKey(fresh)}, kCallTimeout)[0], Status::Ok());
  EXPECT_EQ(replicas_first->Exists({TestKey(fresh)}, kCallTimeout)[0].code(),
            StatusCode::kNotFound);
  EXPECT_EQ(replicas_first->stats().replica_lookup_fallbacks, 0u);

  cluster->node(master).Kill();
  ASSERT_TRUE(cluster->Cli(r, {"CLUSTER", "FAILOVER", "TAKEOVER"}).ok());
  ASSERT_TRUE(cluster->WaitConverged(milliseconds(15000), slot, replica));
  ASSERT_TRUE(replicas_first->RefreshTopology().ok());
  ASSERT_TRUE(masters_only->RefreshTopology().ok());

  // The block the master-only lookup promised is gone with the master: a lost hit. Every block
  // the replica had is still there.
  EXPECT_EQ(masters_only->Get({TestKey(fresh)}, kCallTimeout)[0].status().code(),
            StatusCode::kNotFound);
  ExpectBlocks(*replicas_first, blocks, 256);
  std::vector<std::string> keys;
  for (const uint64_t i : blocks) keys.push_back(TestKey(i));
  ExpectFound(replicas_first->Exists(keys, kCallTimeout), blocks.size());
}

// Three masters and no replica, with a node timeout long enough that a master stopped by a test
// is not failed over meanwhile, and a client whose breaker opens after two failed calls and then
// skips the node for `backoff`.
struct ClusterWithBreaker {
  std::unique_ptr<RedisCluster> cluster;
  std::unique_ptr<RedisClusterClient> client;
};
ClusterWithBreaker StartClusterWithBreaker(milliseconds backoff) {
  ClusterWithBreaker out;
  out.cluster =
      StartCluster({.masters = 3, .replicas_per_master = 0, .node_timeout = milliseconds(60000)});
  if (!out.cluster) return out;
  RedisClusterOptions options;
  options.breaker = {.failure_threshold = 2, .initial_backoff = backoff, .max_backoff = backoff};
  out.client = OpenClient(out.cluster->Seeds(), options);
  return out;
}

TEST(RedisClusterClient, HungMasterTimesOutThenIsSkippedThenComesBack) {
  // A backoff long enough that the third call surely finds the breaker still open.
  // (Named references, not a structured binding: the lambdas below capture them.)
  ClusterWithBreaker setup = StartClusterWithBreaker(milliseconds(1000));
  auto& cluster = setup.cluster;
  auto& client = setup.client;
  ASSERT_TRUE(cluster);
  ASSERT_TRUE(client);
  // One block on the master to stop and one elsewhere.
  const int victim = cluster->MasterOfSlot(KeySlot(TestKey(0)));
  uint64_t other = 1;
  while (cluster->MasterOfSlot(KeySlot(TestKey(other))) == victim) ++other;
  PutBlocks(*client, {0, other}, 64);

  cluster->node(static_cast<size_t>(victim)).Stop();
  const milliseconds timeout{300};
  for (int call = 0; call < 2; ++call) {
    const auto start = Clock::now();
    const auto got = client->Get({TestKey(0), TestKey(other)}, timeout);
    const auto took = Clock::now() - start;
    EXPECT_EQ(got[0].status().code(), StatusCode::kTimeout) << got[0].status().ToString();
    EXPECT_TRUE(got[1].ok()) << "a healthy node's key is served meanwhile";
    EXPECT_GE(took, timeout - milliseconds(5));
    EXPECT_LT(took, timeout + milliseconds(500));
  }
  EXPECT_EQ(client->stats().breaker_openings, 1u);
  // The breaker is open: no waiting on the hung node at all.
  const auto start = Clock::now();
  const auto skipped = client->Get({TestKey(0)}, timeout);
  EXPECT_EQ(skipped[0].status().code(), StatusCode::kBusy) << skipped[0].status().ToString();
  EXPECT_LT(Clock::now() - start, milliseconds(100));
  EXPECT_EQ(client->stats().open_breakers, 1u);

  cluster->node(static_cast<size_t>(victim)).Continue();
  EXPECT_TRUE(testing::PollUntil(milliseconds(5000),
                                 [&] { return client->Get({TestKey(0)}, timeout)[0].ok(); }));
  EXPECT_EQ(client->stats().open_breakers, 0u);
  EXPECT_GE(client->stats().errors_timeout, 2u);
  EXPECT_GE(client->stats().errors_breaker, 1u);
}

TEST(RedisClusterClient, LookupsTimingOutOnASlowNodeDoNotShutItOutOfLongerCalls) {
  // A node that stalls past a lookup's 20 ms (a fork for a snapshot) but answers a 1 s call: the
  // lookups' timeouts say too little of it to open its breaker, which would refuse the mover's
  // publishes and fetches at once.
  ClusterWithBreaker setup = StartClusterWithBreaker(milliseconds(5000));
  auto& cluster = setup.cluster;
  auto& client = setup.client;
  ASSERT_TRUE(cluster);
  ASSERT_TRUE(client);
  PutBlocks(*client, {0}, 64);
  const int victim = cluster->MasterOfSlot(KeySlot(TestKey(0)));

  cluster->node(static_cast<size_t>(victim)).Stop();
  for (int call = 0; call < 4; ++call) {
    const auto looked = client->Exists({TestKey(0)}, milliseconds(20));
    ASSERT_EQ(looked.size(), 1u);
    EXPECT_EQ(looked[0].code(), StatusCode::kTimeout) << looked[0].ToString();
  }
  EXPECT_EQ(client->stats().breaker_openings, 0u);
  cluster->node(static_cast<size_t>(victim)).Continue();
  ExpectBlocks(*client, {0}, 64);
  EXPECT_EQ(client->stats().errors_breaker, 0u);
}

TEST(RedisClusterClient, WholeClusterDownGivesErrorsNotHangs) {
  auto cluster =
      StartCluster({.masters = 3, .replicas_per_master = 0, .node_timeout = milliseconds(60000)});
  ASSERT_TRUE(cluster);
  auto client = OpenClient(cluster->Seeds());
  ASSERT_TRUE(client);
  std::vector<uint64_t> blocks;
  for (uint64_t i = 0; i < 30; ++i) blocks.push_back(i);
  PutBlocks(*client, blocks, 64);
  std::vector<std::string> keys;
  for (const uint64_t i : blocks) keys.push_back(TestKey(i));

  const milliseconds timeout{300};
  auto expect_bounded_failure = [&](const char* phase) {
    const auto start = Clock::now();
    const auto got = client->Get(keys, timeout);
    EXPECT_LT(Clock::now() - start, timeout + milliseconds(500)) << phase;
    for (const auto& r : got) EXPECT_FALSE(r.ok()) << phase;
  };
  for (size_t n = 0; n < 3; ++n) cluster->node(n).Stop();
  expect_bounded_failure("stopped");
  for (size_t n = 0; n < 3; ++n) cluster->node(n).Kill();
  for (int call = 0; call < 3; ++call) expect_bounded_failure("killed");

  // A new client finds no seed: a clear error, within the connect timeout per seed.
  RedisClusterOptions options;
  options.seeds = cluster->Seeds();
  options.connect_timeout = milliseconds(300);
  const auto start = Clock::now();
  const auto refused = RedisClusterClient::Open(options);
  EXPECT_EQ(refused.status().code(), StatusCode::kDeviceError);
  EXPECT_NE(refused.status().message().find(cluster->Seeds()[0].ToString()), std::string::npos)
      << refused.status().message();
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
}

}  // namespace
}  // namespace kvtier::tiers::remote
