// The remote tier's publishing: blocks the mover drops from the last local tier are written to the
// remote store first, as records other nodes can verify.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "daemon/store/store.h"
#include "daemon/store/store_test_fixture.h"
#include "tests/fakes/fake_remote_store.h"
#include "tiers/remote/remote_record.h"

namespace kvtier::store::testing {
namespace {

using kvtier::testing::FakeRemoteStore;
using tiers::remote::DecodeRecord;
using tiers::remote::RemoteKey;

class StoreRemoteTest : public StoreTest {
 protected:
  StoreOptions WithRemote(bool background = false) {
    StoreOptions options;
    options.remote.store = &remote_;
    options.remote.ttl = std::chrono::milliseconds(60'000);
    options.background_disk_moves = background;
    return options;
  }

  // The payload the remote store holds for block n, verified as a fetching node would.
  std::optional<std::vector<std::byte>> Published(uint64_t n) {
    std::optional<std::string> value = remote_.Value(RemoteKey(kNs, Key(n)));
    if (!value) return std::nullopt;
    auto record = DecodeRecord(*value, kNs, Key(n));
    EXPECT_TRUE(record.ok()) << record.status().ToString();
    if (!record.ok()) return std::nullopt;
    return std::vector<std::byte>(record->payload.begin(), record->payload.end());
  }

  FakeRemoteStore remote_;
};

TEST_F(StoreRemoteTest, TheMoverPublishesTheHostBlocksItDropsWhenHostIsTheLastTier) {
  Build({4}, true, WithRemote());
  for (uint64_t n = 0; n < 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 2 * kBlock, 8), 2u);
  // The two least recently used blocks left the node for the remote tier, byte for byte.
  for (uint64_t n : {0, 1}) {
    EXPECT_FALSE(Cached(n));
    EXPECT_EQ(Published(n), Payload(n)) << n;
  }
  for (uint64_t n : {2, 3}) EXPECT_FALSE(Published(n)) << n;
  EXPECT_EQ(remote_.sets(), 1);  // one batch for the round
  EXPECT_EQ(remote_.last_ttl(), std::chrono::milliseconds(60'000));
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.remote_publishes, 2u);
  EXPECT_EQ(s.remote_publish_bytes, 2 * kBlock);
  EXPECT_EQ(s.remote_publish_errors, 0u);
  EXPECT_EQ(s.evicted_blocks, 2u);
}

TEST_F(StoreRemoteTest, BlocksDroppedFromNvmeArePublishedFromTheDevice) {
  Build({2, 2}, /*last_addressable=*/false, WithRemote());
  for (uint64_t n = 0; n < 4; ++n) ASSERT_TRUE(PutBlock(n).ok());      // 0 and 1 go down to NVMe
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 2 * kBlock, 8), 0u);  // nothing to do there
  EXPECT_EQ(remote_.size(), 0u);  // demotion to NVMe publishes nothing: the block stays local
  EXPECT_EQ(store_->EvictToTarget(TierId::kNvme, 0, 8), 2u);
  for (uint64_t n : {0, 1}) EXPECT_EQ(Published(n), Payload(n)) << n;
  EXPECT_EQ(store_->Stats().remote_publishes, 2u);
}

// At a clean stop, the host blocks written to NVMe take the room of older NVMe blocks: those are
// published first, as any block leaving NVMe above a remote tier is.
TEST_F(StoreRemoteTest, TheCleanStopFlushPublishesTheNvmeBlocksItDrops) {
  Build({2, 2}, /*last_addressable=*/false, WithRemote());
  for (uint64_t n = 0; n < 4; ++n) ASSERT_TRUE(PutBlock(n).ok());  // 0 and 1 go down to NVMe
  ASSERT_EQ(remote_.size(), 0u);
  const Store::FlushResult r = store_->FlushToNvme(0, {});
  EXPECT_EQ(r.written, 2u);
  for (uint64_t n : {0, 1}) EXPECT_EQ(Published(n), Payload(n)) << n;
  for (uint64_t n : {2, 3}) EXPECT_FALSE(Published(n)) << "kept on NVMe: " << n;
  EXPECT_EQ(store_->Stats().remote_publishes, 2u);
}

// A recent write-through copy the cluster no longer holds (evicted under maxmemory, lost in a
// failover) is published again at the drop: the skip above asks the cluster first.
TEST_F(StoreRemoteTest, AWriteThroughCopyTheClusterLostIsPublishedAtTheDrop) {
  StoreOptions options = WithRemote(/*background=*/true);
  options.remote.write_through = true;
  Build({4}, true, options);
  for (uint64_t n = 0; n < 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  store_->WriteThroughToRemote(store_->TakeRemoteWriteThroughRequests(8));
  ASSERT_EQ(remote_.Delete({RemoteKey(kNs, Key(0))}, std::chrono::seconds(1))[0].code(),
            StatusCode::kOk);
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 2 * kBlock, 8), 2u);  // blocks 0 and 1
  EXPECT_EQ(Published(0), Payload(0)) << "sent again";
  EXPECT_EQ(Published(1), Payload(1)) << "its write-through copy";
  EXPECT_EQ(store_->Stats().remote_publishes_saved, 1u);
  EXPECT_EQ(store_->Stats().remote_publishes, 5u);
}

// The flush publishes its NVMe victims a batch per round trip, and drops no more of them than the
// memory blocks it writes need.
TEST_F(StoreRemoteTest, TheCleanStopFlushPublishesItsVictimsInOneBatchAndOnlyThoseItNeeds) {
  Build({2, 4}, /*last_addressable=*/false, WithRemote());
  for (uint64_t n = 0; n < 6; ++n) ASSERT_TRUE(PutBlock(n).ok());  // 0 to 3 go down to NVMe
  ASSERT_EQ(remote_.size(), 0u);
  const Store::FlushResult r = store_->FlushToNvme(0, {});
  EXPECT_EQ(r.written, 2u);
  EXPECT_EQ(remote_.sets(), 1);
  for (uint64_t n : {0, 1}) EXPECT_EQ(Published(n), Payload(n)) << n;
  for (uint64_t n : {2, 3}) {
    EXPECT_FALSE(Published(n)) << n;
    EXPECT_EQ(TierOf(n), TierId::kNvme) << "kept: " << n;
  }
  for (uint64_t n : {4, 5}) EXPECT_EQ(TierOf(n), TierId::kNvme) << "flushed: " << n;
}

// A node-local namespace (the generic key space) never leaves the node: its drops are not
// published, its misses are not fetched, its lookups do not ask the remote tier.
TEST_F(StoreRemoteTest, ANodeLocalNamespaceIsNeitherPublishedNorFetched) {
  Build({4}, true, WithRemote(/*background=*/true));
  NamespaceInfo local{NamespaceId{{0x10C, 0x1}}, 0, kBlock, "generic"};
  local.node_local = true;
  ASSERT_TRUE(store_->RegisterNamespace(local).ok());
  for (uint64_t n = 0; n < 4; ++n) ASSERT_TRUE(PutBlock(n, local.id).ok());
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 2 * kBlock, 8), 2u);
  EXPECT_EQ(remote_.size(), 0u);
  EXPECT_EQ(store_->Stats().remote_publishes, 0u);
  // A block of that name in the remote tier (another node's) is not fetched: a plain miss.
  ASSERT_FALSE(Cached(0));
  remote_.SetValue(RemoteKey(local.id, Key(0)), "another node's value");
  EXPECT_EQ(store_->Acquire(local.id, Key(0), Store::Reader::kHostMemory).status().code(),
            StatusCode::kNotFound);
  EXPECT_FALSE(store_->StartRemoteLookup(local.id, {Key(0)}, [](size_t) {}));
}

TEST_F(StoreRemoteTest, ARefusedPublishIsCountedAndTheBlockIsDroppedAllTheSame) {
  Build({2}, true, WithRemote());
  for (uint64_t n = 0; n < 2; ++n) ASSERT_TRUE(PutBlock(n).ok());
  remote_.FailWith(Busy("OOM command not allowed"));
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 0, 8), 2u);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.remote_publishes, 0u);
  EXPECT_EQ(s.remote_publish_errors, 2u);
  EXPECT_EQ(s.evicted_blocks, 2u);
  EXPECT_FALSE(Cached(0));
}

TEST_F(StoreRemoteTest, ALeasedVictimIsNeitherPublishedNorDropped) {
  Build({2}, true, WithRemote());
  for (uint64_t n = 0; n < 2; ++n) ASSERT_TRUE(PutBlock(n).ok());
  Result<Lease> lease = store_->Acquire(kNs, Key(0));
  ASSERT_TRUE(lease.ok());
  store_->EvictToTarget(TierId::kHost, 0, 8);
  EXPECT_TRUE(Cached(0));
  EXPECT_FALSE(Published(0));
  EXPECT_TRUE(Published(1));
  ASSERT_TRUE(store_->Release(lease->id).ok());
}

TEST_F(StoreRemoteTest, APutThatFindsTheHostFullWaitsForTheMoverWhichPublishes) {
  Build({2}, true, WithRemote(/*background=*/true));
  EXPECT_TRUE(store_->HostHasTierBelow());
  for (uint64_t n = 0; n < 2; ++n) ASSERT_TRUE(PutBlock(n).ok());
  // No eviction on the put's thread: it asks the mover, which publishes before it drops.
  Result<Reservation> r = store_->BeginPut(kNs, Key(2), kBlock);
  ASSERT_EQ(r.status().code(), StatusCode::kPending) << r.status().ToString();
  EXPECT_EQ(remote_.sets(), 0);
  const uint64_t bytes = store_->TakeRoomRequest();
  ASSERT_EQ(bytes, kBlock);
  EXPECT_TRUE(store_->MakeRoom(bytes));
  EXPECT_EQ(Published(0), Payload(0));
  ASSERT_TRUE(PutBlock(2).ok());
}

TEST_F(StoreRemoteTest, WriteThroughCopiesCommittedBlocksAndKeepsThemLocal) {
  StoreOptions options = WithRemote(/*background=*/true);
  options.remote.write_through = true;
  Build({4}, true, options);
  for (uint64_t n = 0; n < 2; ++n) ASSERT_TRUE(PutBlock(n).ok());
  EXPECT_EQ(remote_.sets(), 0);  // the commit only asks: the mover sends
  // A reader holding block 0 does not keep its copy from being made.
  Result<Lease> lease = store_->Acquire(kNs, Key(0));
  ASSERT_TRUE(lease.ok());
  const std::vector<WriteThroughRequest> asked = store_->TakeRemoteWriteThroughRequests(8);
  ASSERT_EQ(asked.size(), 2u);
  store_->WriteThroughToRemote(asked);
  EXPECT_EQ(remote_.sets(), 1);  // one batch
  for (uint64_t n : {0, 1}) {
    EXPECT_EQ(Published(n), Payload(n)) << n;
    EXPECT_TRUE(Cached(n)) << n;  // still served locally
  }
  ASSERT_TRUE(store_->Release(lease->id).ok());
  EXPECT_EQ(store_->Stats().remote_publishes, 2u);
  EXPECT_TRUE(store_->TakeRemoteWriteThroughRequests(8).empty());
}

// The remote tier holds a written-through block for remote.ttl: dropping it within half of that
// sends nothing again; later, the drop's copy renews it.
TEST_F(StoreRemoteTest, ADropSoonAfterAWriteThroughIsNotSentAgain) {
  StoreOptions options = WithRemote(/*background=*/true);
  options.remote.write_through = true;
  Build({4}, true, options);
  for (uint64_t n = 0; n < 4; ++n) ASSERT_TRUE(PutBlock(n).ok());
  store_->WriteThroughToRemote(store_->TakeRemoteWriteThroughRequests(8));
  ASSERT_EQ(store_->Stats().remote_publishes, 4u);
  const int sets = remote_.sets();
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 3 * kBlock, 8), 1u);  // block 0, 0 s later
  EXPECT_EQ(remote_.sets(), sets);
  EXPECT_EQ(store_->Stats().remote_publishes_saved, 1u);
  EXPECT_EQ(Published(0), Payload(0));                                 // the write-through's copy
  clock_.AdvanceMicros(31'000'000);                                    // past half of the 60 s TTL
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, 2 * kBlock, 8), 1u);  // block 1
  EXPECT_EQ(remote_.sets(), sets + 1);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.remote_publishes, 5u);
  EXPECT_EQ(s.remote_publishes_saved, 1u);
}

TEST_F(StoreRemoteTest, WriteThroughSkipsABlockReplacedOrRemovedBeforeTheMoverCame) {
  StoreOptions options = WithRemote(/*background=*/true);
  options.remote.write_through = true;
  Build({4}, true, options);
  ASSERT_TRUE(PutBlock(0).ok());
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(store_->Remove(kNs, Key(0)).ok());
  store_->WriteThroughToRemote(store_->TakeRemoteWriteThroughRequests(8));
  EXPECT_FALSE(Published(0));
  EXPECT_EQ(Published(1), Payload(1));
  EXPECT_EQ(store_->Stats().remote_publish_errors, 0u);  // skipped, not failed
}

TEST_F(StoreRemoteTest, AFailedWriteThroughIsCountedAndTheBlockStays) {
  StoreOptions options = WithRemote(/*background=*/true);
  options.remote.write_through = true;
  Build({4}, true, options);
  ASSERT_TRUE(PutBlock(0).ok());
  remote_.FailWith(Busy("OOM command not allowed"));
  store_->WriteThroughToRemote(store_->TakeRemoteWriteThroughRequests(8));
  EXPECT_TRUE(Cached(0));
  EXPECT_EQ(store_->Stats().remote_publish_errors, 1u);
}

TEST_F(StoreRemoteTest, WithoutWriteThroughACommitAsksForNoCopy) {
  Build({4}, true, WithRemote(/*background=*/true));
  ASSERT_TRUE(PutBlock(0).ok());
  EXPECT_TRUE(store_->TakeRemoteWriteThroughRequests(8).empty());
}

// Regression: with several mover threads, a MakeRoom that found every victim already being
// published by another thread fell back to the eviction of a put, which dropped the next block
// unpublished (the integration test saw half the drops of a stopped cluster go uncounted).
TEST_F(StoreRemoteTest, MakeRoomWhileAnotherThreadPublishesDropsNothingUnpublished) {
  Build({2}, true, WithRemote(/*background=*/true));
  for (uint64_t n = 0; n < 2; ++n) ASSERT_TRUE(PutBlock(n).ok());
  bool made_room = true;
  bool asked = false;
  // While block 0 is being published (and still holds its room), another thread asks for room.
  remote_.OnSet([&] {
    if (std::exchange(asked, true)) return;
    made_room = store_->MakeRoom(kBlock);
  });
  EXPECT_EQ(store_->EvictToTarget(TierId::kHost, kBlock, 1), 1u);
  EXPECT_FALSE(made_room);  // the room is on its way: block 0's publish frees it
  EXPECT_TRUE(Cached(1));   // and block 1 was not dropped for it
  EXPECT_EQ(Published(0), Payload(0));
  EXPECT_EQ(store_->Stats().evicted_blocks, store_->Stats().remote_publishes);
}

TEST_F(StoreRemoteTest, WithoutARemoteTierNothingChanges) {
  Build({2});
  EXPECT_FALSE(store_->HostHasTierBelow());
  for (uint64_t n = 0; n < 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  EXPECT_EQ(store_->Stats().remote_publishes, 0u);
}

// Another node's record of block n, as it would have published it.
void PublishElsewhere(FakeRemoteStore& remote, uint64_t n) {
  const std::vector<std::byte> payload = Payload(n);
  remote.SetValue(RemoteKey(kNs, Key(n)), tiers::remote::EncodeRecord(kNs, Key(n), payload));
}

// The mover's part of a read that missed locally: drains the remote fetch requests.
void ServeRemoteFetches(Store& store) {
  store.FetchRemote(store.TakeRemoteFetchRequests(SIZE_MAX));
}

TEST_F(StoreRemoteTest, AReadOfABlockOnlyTheRemoteTierHoldsFetchesItIntoHost) {
  Build({4}, true, WithRemote(/*background=*/true));
  PublishElsewhere(remote_, 7);
  // The reader's thread never waits on the network: it hears kPending and the mover fetches.
  Result<Lease> first = store_->Acquire(kNs, Key(7));
  ASSERT_EQ(first.status().code(), StatusCode::kPending) << first.status().ToString();
  EXPECT_EQ(remote_.gets(), 0);
  ServeRemoteFetches(*store_);
  std::vector<std::byte> out;
  ASSERT_TRUE(store_->Get(kNs, Key(7), out).ok());
  EXPECT_EQ(out, Payload(7));
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.remote_fetches, 1u);
  EXPECT_EQ(s.remote_fetch_bytes, kBlock);
  EXPECT_EQ(s.tiers[0].space.block_count, 1u);  // a normal host block now
}

TEST_F(StoreRemoteTest, ACorruptedRemoteRecordIsAMissAndACounterNeverBytes) {
  Build({4}, true, WithRemote(/*background=*/true));
  PublishElsewhere(remote_, 7);
  std::string value = *remote_.Value(RemoteKey(kNs, Key(7)));
  value[value.size() - 1] ^= 0x01;  // one payload bit
  remote_.SetValue(RemoteKey(kNs, Key(7)), value);
  ASSERT_EQ(store_->Acquire(kNs, Key(7)).status().code(), StatusCode::kPending);
  ServeRemoteFetches(*store_);
  EXPECT_EQ(store_->Acquire(kNs, Key(7)).status().code(), StatusCode::kNotFound);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.remote_fetch_corrupt, 1u);
  EXPECT_EQ(s.remote_fetches, 0u);
  EXPECT_FALSE(Cached(7));
}

TEST_F(StoreRemoteTest, AMissEverywhereAsksTheRemoteTierOnceThenMisses) {
  Build({4}, true, WithRemote(/*background=*/true));
  ASSERT_EQ(store_->Acquire(kNs, Key(9)).status().code(), StatusCode::kPending);
  // A reader polling meanwhile does not queue the block twice.
  ASSERT_EQ(store_->Acquire(kNs, Key(9)).status().code(), StatusCode::kPending);
  ServeRemoteFetches(*store_);
  EXPECT_EQ(remote_.gets(), 1);
  EXPECT_EQ(store_->Acquire(kNs, Key(9)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Stats().remote_fetch_misses, 1u);
}

TEST_F(StoreRemoteTest, AFetchIntoAFullHostTierMakesRoomByPublishing) {
  Build({2}, true, WithRemote(/*background=*/true));
  for (uint64_t n = 0; n < 2; ++n) ASSERT_TRUE(PutBlock(n).ok());
  PublishElsewhere(remote_, 7);
  ASSERT_EQ(store_->Acquire(kNs, Key(7)).status().code(), StatusCode::kPending);
  ServeRemoteFetches(*store_);
  EXPECT_TRUE(Cached(7));
  EXPECT_EQ(Published(0), Payload(0));  // the coldest block left for the remote tier
}

TEST_F(StoreRemoteTest, AReaderOfAPrefixHasItsRemoteBlocksFetchedAsOneBatch) {
  Build({8}, true, WithRemote(/*background=*/true));
  ASSERT_TRUE(PutBlock(0).ok());  // the local start of the chain
  for (uint64_t n = 1; n <= 3; ++n) PublishElsewhere(remote_, n);
  ASSERT_EQ(store_->Acquire(kNs, Key(1)).status().code(), StatusCode::kPending);
  store_->PrefetchForRead(kNs, std::vector<BlockKey>{Key(0), Key(2), Key(3), Key(4)});
  ServeRemoteFetches(*store_);
  EXPECT_EQ(remote_.gets(), 1);  // blocks 1, 2, 3 and the absent 4 in one round trip
  for (uint64_t n = 1; n <= 3; ++n) EXPECT_TRUE(Cached(n)) << n;
  EXPECT_EQ(store_->Stats().remote_fetches, 3u);
  EXPECT_EQ(store_->Stats().remote_fetch_misses, 1u);
}

TEST_F(StoreRemoteTest, ARemoteLookupCountsTheLeadingBlocksTheRemoteTierHolds) {
  Build({4}, true, WithRemote(/*background=*/true));
  PublishElsewhere(remote_, 1);
  PublishElsewhere(remote_, 2);
  PublishElsewhere(remote_, 4);  // after a gap: useless without block 3
  const std::vector<BlockKey> keys{Key(1), Key(2), Key(3), Key(4)};
  const index::LookupResult local = store_->Lookup(kNs, keys, /*count_later=*/true);
  EXPECT_EQ(local.ready_prefix, 0u);
  EXPECT_EQ(store_->Stats().namespaces[0].lookup_blocks, 0u) << "counted when it ends";
  size_t found = 99;
  ASSERT_TRUE(store_->StartRemoteLookup(kNs, keys, [&](size_t n) { found = n; }));
  EXPECT_EQ(found, 2u);
  store_->CountLookup(kNs, keys.size(), local, found);
  const NamespaceStats ns = store_->Stats().namespaces[0];
  EXPECT_EQ(ns.hit_blocks[static_cast<size_t>(TierId::kRemote)], 2u);
  EXPECT_EQ(ns.lookup_blocks, 4u);
  EXPECT_EQ(ns.miss_blocks, 2u);
}

// Regression: the misses were the blocks asked for less the hits, so a scrape between a lookup
// and the remote hits counted after it saw them go down (Prometheus reads a counter that goes down
// as a reset). Misses are a counter of their own, counted when the lookup ends.
TEST_F(StoreRemoteTest, MissesNeverGoDownAsRemoteHitsAreCounted) {
  Build({4}, true, WithRemote(/*background=*/true));
  PublishElsewhere(remote_, 1);
  PublishElsewhere(remote_, 2);
  const std::vector<BlockKey> keys{Key(1), Key(2)};
  const index::LookupResult first = store_->Lookup(kNs, keys, /*count_later=*/true);
  store_->CountLookup(kNs, keys.size(), first, 0);  // the remote tier did not answer in time
  const uint64_t before = store_->Stats().namespaces[0].miss_blocks;
  EXPECT_EQ(before, 2u);
  const index::LookupResult second = store_->Lookup(kNs, keys, /*count_later=*/true);
  store_->CountLookup(kNs, keys.size(), second, 2);  // it did
  EXPECT_EQ(store_->Stats().namespaces[0].miss_blocks, before);
  EXPECT_EQ(store_->Stats().namespaces[0].lookup_blocks, 4u);
}

}  // namespace
}  // namespace kvtier::store::testing
