#include "daemon/store/move_requests.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace kvtier::store {
namespace {

const BlockKey kA{{1, 2}};
const BlockKey kB{{3, 4}};
using Keys = std::vector<BlockKey>;

TEST(MoveRequestsTest, RoomRequestsKeepTheLargestSizeUntilTaken) {
  MoveRequests r;
  EXPECT_FALSE(r.HasWork());
  r.AskForRoom(4096);
  r.AskForRoom(1 << 20);
  r.AskForRoom(8192);
  EXPECT_TRUE(r.HasWork());
  EXPECT_EQ(r.TakeRoomRequest(), 1u << 20);
  EXPECT_EQ(r.TakeRoomRequest(), 0u);
  EXPECT_FALSE(r.HasWork());
}

TEST(MoveRequestsTest, FetchesAreServedOldestFirstAndAskedForOnce) {
  MoveRequests r;
  EXPECT_TRUE(r.AskForFetch(kA));
  EXPECT_TRUE(r.AskForFetch(kB));
  EXPECT_FALSE(r.AskForFetch(kA));
  EXPECT_EQ(r.TakeFetches(1), Keys{kA});
  EXPECT_EQ(r.TakeFetches(8), Keys{kB});
  EXPECT_EQ(r.TakeFetches(8), Keys{});
}

// A reader polls while its block is being fetched: asking again then must not queue a second
// fetch, which would find the block pinned by the first, fail, and make the reader miss although
// the first fetch succeeded.
TEST(MoveRequestsTest, AKeyBeingFetchedIsNotAskedForAgain) {
  MoveRequests r;
  ASSERT_TRUE(r.AskForFetch(kA));
  ASSERT_EQ(r.TakeFetches(8), Keys{kA});
  EXPECT_FALSE(r.AskForFetch(kA));
  EXPECT_EQ(r.TakeFetches(8), Keys{});
  r.FinishFetch(kA, /*moved=*/true);
  EXPECT_FALSE(r.TakeFailedFetch(kA, {}));
  EXPECT_TRUE(r.AskForFetch(kA));  // moved down again later: a new fetch
}

TEST(MoveRequestsTest, AFailedFetchIsRememberedOnce) {
  MoveRequests r;
  ASSERT_TRUE(r.AskForFetch(kA));
  ASSERT_EQ(r.TakeFetches(8), Keys{kA});
  r.FinishFetch(kA, /*moved=*/false);
  EXPECT_TRUE(r.TakeFailedFetch(kA, {}));
  EXPECT_FALSE(r.TakeFailedFetch(kA, {}));
}

// A failure older than any reader's wait answers nobody: a prefetch's whose reader stopped at an
// earlier miss, taken by a reader of a later request (the block may have been put again since
// and lie on NVMe). It is a miss no more, and it is forgotten.
TEST(MoveRequestsTest, AFetchFailureOlderThanAReadersWaitIsNotItsAnswer) {
  MoveRequests r;
  ASSERT_TRUE(r.AskForFetch(kA));
  ASSERT_TRUE(r.AskForFetch(kB));
  ASSERT_EQ(r.TakeFetches(8), (Keys{kA, kB}));
  r.FinishFetch(kA, /*moved=*/false);
  r.FinishFetch(kB, /*moved=*/false);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const auto waiting_since = std::chrono::steady_clock::now();
  EXPECT_FALSE(r.TakeFailedFetch(kA, waiting_since));
  EXPECT_FALSE(r.TakeFailedFetch(kA, {})) << "forgotten once taken";
  EXPECT_TRUE(r.TakeFailedFetch(kB, waiting_since - std::chrono::seconds(1)));
}

// Remote fetches wait for the network: past a bound, a read is told to miss instead of queueing
// behind requests whose readers may have given up; a key asked for already is not refused.
TEST(MoveRequestsTest, RemoteFetchesAreBoundedAndAKeyAskedForIsNotAskedAgain) {
  using Ask = MoveRequests::RemoteAsk;
  MoveRequests requests;
  const NamespaceId ns{{9, 9}};
  uint64_t n = 0;
  while (requests.AskForRemoteFetch(ns, BlockKey{{n, n}}) == Ask::kQueued) ++n;
  EXPECT_GE(n, 64u);  // a reader's whole prefetch fits many times over
  EXPECT_EQ(requests.AskForRemoteFetch(ns, BlockKey{{n, n}}), Ask::kQueueFull);
  EXPECT_EQ(requests.AskForRemoteFetch(ns, BlockKey{{0, 0}}), Ask::kAlreadyAsked);
  // Taking some makes room again.
  EXPECT_EQ(requests.TakeRemoteFetches(8, {}).size(), 8u);
  EXPECT_EQ(requests.AskForRemoteFetch(ns, BlockKey{{n, n}}), Ask::kQueued);
}

// A fetch nobody waits for any more is not sent: it would delay those readers still wait for.
TEST(MoveRequestsTest, RemoteFetchesOlderThanTheirReadersWaitAreDroppedUnsent) {
  using Ask = MoveRequests::RemoteAsk;
  MoveRequests requests;
  const NamespaceId ns{{9, 9}};
  ASSERT_EQ(requests.AskForRemoteFetch(ns, kA), Ask::kQueued);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto readers_still_waiting_since = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(requests.AskForRemoteFetch(ns, kB), Ask::kQueued);
  uint64_t expired = 0;
  const auto taken = requests.TakeRemoteFetches(8, readers_still_waiting_since, &expired);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].second, kB);
  EXPECT_EQ(expired, 1u);
  EXPECT_FALSE(requests.TakeFailedFetch(kA, {})) << "not a failure: nobody is told";
  EXPECT_EQ(requests.AskForRemoteFetch(ns, kA), Ask::kQueued) << "a reader that still wants it";
}

TEST(MoveRequestsTest, TheListenerHearsOfEveryFinishedFetchUntilRemoved) {
  MoveRequests r;
  int heard = 0;
  r.SetMoveListener([&heard] { ++heard; });
  ASSERT_TRUE(r.AskForFetch(kA));
  ASSERT_TRUE(r.AskForFetch(kB));
  ASSERT_EQ(r.TakeFetches(8), (Keys{kA, kB}));
  r.FinishFetch(kA, /*moved=*/true);
  r.FinishFetch(kB, /*moved=*/false);  // a reader waits for a failure too
  EXPECT_EQ(heard, 2);
  r.NotifyMoved();
  EXPECT_EQ(heard, 3);
  r.SetMoveListener({});
  r.NotifyMoved();
  EXPECT_EQ(heard, 3);
}

// The acknowledgement of a put under nvme.write_through: a copy's outcome is known to its waiter
// (once), a failure is kept until taken, and a waiter that gave up leaves nothing behind.
TEST(MoveRequestsTest, AWriteThroughsOutcomeIsKeptForItsWaiterUntilTaken) {
  MoveRequests r;
  r.AskForWriteThrough(kA, 1);
  r.AskForWriteThrough(kB, 2);
  r.TrackWriteThrough(3);  // a copy the committing thread makes itself
  EXPECT_TRUE(r.WriteThroughTracked(1));
  EXPECT_FALSE(r.WriteThroughTracked(4));
  EXPECT_EQ(r.TakeWriteThroughOutcome(1), std::nullopt) << "pending";
  ASSERT_EQ(r.TakeWriteThroughs(8).size(), 2u) << "the tracked one is not queued";

  r.FinishWriteThrough(1, Status::Ok());
  r.FinishWriteThrough(2, DeviceError("disk gone"));
  r.FinishWriteThrough(3, Busy("no room"));
  EXPECT_FALSE(r.WriteThroughPending(2));
  EXPECT_FALSE(r.WriteThroughTracked(1)) << "a copy that was made needs no memory";
  EXPECT_TRUE(r.WriteThroughTracked(2)) << "a failure waits for its waiter";
  EXPECT_TRUE(r.TakeWriteThroughOutcome(1)->ok());
  EXPECT_EQ(r.TakeWriteThroughOutcome(2)->code(), StatusCode::kDeviceError);
  EXPECT_TRUE(r.TakeWriteThroughOutcome(2)->ok()) << "taken once";
  EXPECT_EQ(r.TakeWriteThroughOutcome(3)->code(), StatusCode::kBusy);
  EXPECT_FALSE(r.WriteThroughTracked(3));

  // A waiter gives up on a pending copy (and on a failed one): nothing is kept for it.
  r.AskForWriteThrough(kA, 5);
  r.ForgetWriteThrough(5);
  r.FinishWriteThrough(5, DeviceError("disk gone"));
  EXPECT_FALSE(r.WriteThroughTracked(5));
  r.AskForWriteThrough(kA, 6);
  r.FinishWriteThrough(6, DeviceError("disk gone"));
  r.ForgetWriteThrough(6);
  EXPECT_FALSE(r.WriteThroughTracked(6));
}

}  // namespace
}  // namespace kvtier::store
