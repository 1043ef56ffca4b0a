#include "daemon/store/departure_log.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kvtier::store {
namespace {

// Keys of one shard (the same top four bits), so tests control which ring they land in.
BlockKey KeyInShard0(uint64_t n) {
  BlockKey k;
  k.high = n;  // top bits 0: shard 0
  k.low = n * 7 + 1;
  return k;
}

NamespaceId Ns(uint64_t n) {
  NamespaceId ns;
  ns.low = n;
  return ns;
}

Departure Evicted(const BlockKey& key, const NamespaceId& ns, uint64_t at_us) {
  Departure d;
  d.key = key;
  d.ns = ns;
  d.at_us = at_us;
  d.tier = TierId::kNvme;
  d.reason = DepartureReason::kEvicted;
  d.cause = EvictionCause::kLastTier;
  d.tier_used_bytes = 90;
  d.tier_capacity_bytes = 100;
  return d;
}

TEST(DepartureLogTest, FindsTheNewestDepartureOfEachKey) {
  DepartureLog log(64);
  log.Record(Evicted(KeyInShard0(1), Ns(1), 10));
  Departure corrupt = Evicted(KeyInShard0(1), Ns(1), 20);
  corrupt.reason = DepartureReason::kCorrupt;
  corrupt.cause = EvictionCause::kNone;
  log.Record(corrupt);
  log.Record(Evicted(KeyInShard0(2), Ns(1), 30));

  const std::vector<BlockKey> keys = {KeyInShard0(1), KeyInShard0(3), KeyInShard0(2),
                                      KeyInShard0(1)};
  const std::vector<std::optional<Departure>> found = log.Find(Ns(1), keys);
  ASSERT_EQ(found.size(), 4u);
  ASSERT_TRUE(found[0]);
  EXPECT_EQ(found[0]->reason, DepartureReason::kCorrupt);
  EXPECT_EQ(found[0]->at_us, 20u);
  EXPECT_FALSE(found[1]);
  ASSERT_TRUE(found[2]);
  EXPECT_EQ(found[2]->at_us, 30u);
  EXPECT_EQ(found[2]->tier, TierId::kNvme);
  EXPECT_EQ(found[2]->cause, EvictionCause::kLastTier);
  EXPECT_EQ(found[2]->tier_used_bytes, 90u);
  ASSERT_TRUE(found[3]);  // a key asked twice is answered twice
  EXPECT_EQ(found[3]->at_us, 20u);
  EXPECT_EQ(log.recorded(), 3u);
}

TEST(DepartureLogTest, AnotherNamespacesDepartureIsNotReported) {
  DepartureLog log(64);
  log.Record(Evicted(KeyInShard0(1), Ns(2), 10));
  EXPECT_FALSE(log.Find(Ns(1), std::vector<BlockKey>{KeyInShard0(1)})[0]);
  EXPECT_TRUE(log.Find(Ns(2), std::vector<BlockKey>{KeyInShard0(1)})[0]);
}

TEST(DepartureLogTest, IsBoundedAndOverwritesTheOldestOfItsRing) {
  // 32 entries: 2 per shard. Three departures in shard 0 leave the last two.
  DepartureLog log(32);
  EXPECT_EQ(log.capacity(), 32u);
  for (uint64_t i = 1; i <= 3; ++i) log.Record(Evicted(KeyInShard0(i), Ns(1), i));
  const std::vector<BlockKey> keys = {KeyInShard0(1), KeyInShard0(2), KeyInShard0(3)};
  const std::vector<std::optional<Departure>> found = log.Find(Ns(1), keys);
  EXPECT_FALSE(found[0]) << "the oldest entry was overwritten";
  EXPECT_TRUE(found[1]);
  EXPECT_TRUE(found[2]);
  EXPECT_EQ(log.recorded(), 3u);

  // Many more departures than entries: memory stays at capacity, the newest are kept.
  for (uint64_t i = 4; i <= 1000; ++i) log.Record(Evicted(KeyInShard0(i), Ns(1), i));
  const std::vector<BlockKey> last = {KeyInShard0(999), KeyInShard0(1000), KeyInShard0(998)};
  const std::vector<std::optional<Departure>> tail = log.Find(Ns(1), last);
  EXPECT_TRUE(tail[0]);
  EXPECT_TRUE(tail[1]);
  EXPECT_FALSE(tail[2]);
  EXPECT_EQ(log.recorded(), 1000u);
}

TEST(DepartureLogTest, CapacityRoundsUpToWholeShardsAndZeroRecordsNothing) {
  EXPECT_EQ(DepartureLog(1).capacity(), DepartureLog::kShards);
  DepartureLog off(0);
  off.Record(Evicted(KeyInShard0(1), Ns(1), 1));
  EXPECT_EQ(off.capacity(), 0u);
  EXPECT_FALSE(off.Find(Ns(1), std::vector<BlockKey>{KeyInShard0(1)})[0]);
}

TEST(DepartureLogTest, RecordsFromManyThreads) {
  DepartureLog log(1024);
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&log, t] {
      for (uint64_t i = 0; i < 1000; ++i) {
        BlockKey k;
        k.high = (t * 1000 + i) * 0x9E3779B97F4A7C15ULL;
        k.low = i;
        log.Record(Evicted(k, Ns(1), i));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(log.recorded(), 4000u);
}

}  // namespace
}  // namespace kvtier::store
