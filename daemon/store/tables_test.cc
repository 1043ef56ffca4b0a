// The store's bookkeeping tables on their own: LeaseTable, ReservationTable, NamespaceRegistry.
#include <gtest/gtest.h>

#include "daemon/store/lease_table.h"
#include "daemon/store/namespace_registry.h"
#include "daemon/store/reservation_table.h"

namespace kvtier::store {
namespace {

const NamespaceId kNs{{1, 1}};
const NamespaceId kOther{{2, 2}};
const BlockKey kKey{{3, 4}};

TEST(LeaseTableTest, ALeaseEndsOnceByTakeOrByItsDeadline) {
  LeaseTable t(2);
  t.Add(1, {kNs, kKey, /*deadline_us=*/100});
  t.Add(2, {kNs, kKey, /*deadline_us=*/200});
  EXPECT_TRUE(t.Full());
  ASSERT_TRUE(t.Take(1).has_value());
  EXPECT_FALSE(t.Take(1).has_value());  // released twice: the second finds nothing
  EXPECT_FALSE(t.Renew(1, 500));
  ASSERT_TRUE(t.Renew(2, 500));
  EXPECT_TRUE(t.TakeExpired(499).empty());  // renewed past 200
  std::vector<LeaseRecord> expired = t.TakeExpired(500);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].key, kKey);
  EXPECT_EQ(t.size(), 0u);
}

TEST(LeaseTableTest, ACorruptMarkTravelsWithTheRecord) {
  LeaseTable t(8);
  t.Add(7, {kNs, kKey, 100});
  EXPECT_EQ(t.NamespaceOf(7), kNs);
  t.MarkCorrupt(7);
  t.MarkCorrupt(8);  // an ended lease: nothing to mark
  std::optional<LeaseRecord> r = t.Take(7);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->corrupt);
  EXPECT_FALSE(t.NamespaceOf(7).has_value());
}

TEST(ReservationTableTest, ATimedOutReservationIsQuarantinedThenReleased) {
  ReservationTable t(4);
  t.Add(1, {kNs, kKey, TierId::kHost, Extent{0, 4096}, 1, /*deadline_us=*/100});
  ReservationTable::Expired e = t.Expire(100, /*quarantine_us=*/1000);
  ASSERT_EQ(e.timed_out.size(), 1u);
  EXPECT_TRUE(e.released.empty());
  EXPECT_EQ(t.quarantined(), 1u);
  EXPECT_FALSE(t.Renew(1, 5000));  // a quarantined slot must not be written into any more
  std::optional<ReservationRecord> r = t.Find(1, /*erase=*/false);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->expired);
  EXPECT_TRUE(t.Expire(1099, 1000).released.empty());
  e = t.Expire(1100, 1000);
  ASSERT_EQ(e.released.size(), 1u);
  EXPECT_FALSE(t.Find(1, false).has_value());
}

TEST(ReservationTableTest, FindWithEraseTakesItOnce) {
  ReservationTable t(1);
  t.Add(9, {kNs, kKey, TierId::kHost, Extent{0, 4096}, 9, 100});
  EXPECT_TRUE(t.Full());
  ASSERT_TRUE(t.Renew(9, 200));
  EXPECT_EQ(t.Find(9, /*erase=*/true)->deadline_us, 200u);
  EXPECT_FALSE(t.Find(9, true).has_value());
  EXPECT_FALSE(t.Full());
}

TEST(NamespaceRegistryTest, CountersOutliveADropAndAdoptionCanBeRefused) {
  NamespaceRegistry r;
  ASSERT_TRUE(r.Register({kNs, 16, 4096, "a"}).ok());
  ASSERT_TRUE(r.Register({kNs, 16, 4096, "a again"}).ok());
  EXPECT_EQ(r.Register({kNs, 32, 4096, "other shape"}).code(), StatusCode::kInvalidArgument);
  std::optional<NamespaceRegistry::Entry> e = r.Find(kNs);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->block_bytes, 4096u);
  EXPECT_EQ(e->tokens_per_block, 16u);
  EXPECT_EQ(r.Get(kNs)->label, "a");
  ASSERT_NE(e->counters, nullptr);
  EXPECT_EQ(e->counters, r.Counters(kNs));
  e->counters->puts.fetch_add(3);

  EXPECT_EQ(r.Drop(kOther, false, 1).code(), StatusCode::kNotFound);
  EXPECT_TRUE(r.Holds(kNs, 5));
  ASSERT_TRUE(r.Drop(kNs, /*refuse_adoption=*/true, /*generation_watermark=*/10).ok());
  EXPECT_FALSE(r.Holds(kNs, 12));  // not registered
  EXPECT_TRUE(r.DroppedSince(kNs, 9));
  EXPECT_FALSE(r.DroppedSince(kNs, 10));
  EXPECT_FALSE(r.DroppedSince(kOther, 0));
  EXPECT_FALSE(r.Registered(kNs));
  EXPECT_FALSE(r.Find(kNs).has_value());
  EXPECT_TRUE(r.AdoptionRefused(kNs));
  EXPECT_FALSE(r.AdoptionRefused(kOther));
  ASSERT_NE(r.Counters(kNs), nullptr);  // late releases still count somewhere valid
  int seen = 0;
  r.ForEach([&](const NamespaceId& id, const NamespaceInfo* info, const NamespaceCounters& c) {
    ++seen;
    EXPECT_EQ(id, kNs);
    EXPECT_EQ(info, nullptr);  // dropped
    EXPECT_EQ(c.puts.load(), 3u);
  });
  EXPECT_EQ(seen, 1);
}

}  // namespace
}  // namespace kvtier::store
