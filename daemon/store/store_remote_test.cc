// The remote tier's publishing: blocks the mover drops from the last local tier are written to the
// remote store first, as records other nodes can verify.
#include <gtest/gtest.h>

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

TEST_F(StoreRemoteTest, WithoutARemoteTierNothingChanges) {
  Build({2});
  EXPECT_FALSE(store_->HostHasTierBelow());
  for (uint64_t n = 0; n < 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  EXPECT_EQ(store_->Stats().remote_publishes, 0u);
}

}  // namespace
}  // namespace kvtier::store::testing
