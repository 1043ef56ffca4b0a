// Store::Explain and the departure log the store fills: present blocks name their tier, and each
// way out of the node (an eviction and why it was a drop, a removal, a namespace drop) is recorded
// with the tier it left from.
#include <gtest/gtest.h>

#include "daemon/store/store.h"
#include "daemon/store/store_test_fixture.h"

namespace kvtier::store {
namespace {

using testing::kBlock;
using testing::Key;
using testing::kNs;
using testing::StoreTest;
using State = BlockExplanation::State;

class StoreExplainTest : public StoreTest {
 protected:
  std::vector<BlockExplanation> Explain(std::initializer_list<uint64_t> ns) {
    std::vector<BlockKey> keys;
    for (uint64_t n : ns) keys.push_back(Key(n));
    return store_->Explain(kNs, keys);
  }
};

TEST_F(StoreExplainTest, ABlockNvmeAdmissionRefusedIsEvictedFromHostWithThatCause) {
  StoreOptions options;
  options.nvme_admission = "reused";  // a block never read is not written to NVMe
  Build({1, 8}, /*last_addressable=*/false, options);
  ASSERT_TRUE(PutBlock(1).ok());
  clock_.AdvanceMicros(1'000);
  ASSERT_TRUE(PutBlock(2).ok());  // evicts block 1, which admission refuses
  clock_.AdvanceMicros(3'000);
  const std::vector<BlockExplanation> ex = Explain({1, 2, 3});
  ASSERT_EQ(ex.size(), 3u);
  EXPECT_EQ(ex[0].state, State::kAbsent);
  ASSERT_TRUE(ex[0].departure);
  EXPECT_EQ(ex[0].departure->reason, DepartureReason::kEvicted);
  EXPECT_EQ(ex[0].departure->cause, EvictionCause::kAdmissionRefused);
  EXPECT_EQ(ex[0].departure->tier, TierId::kHost);
  EXPECT_EQ(ex[0].departure->tier_used_bytes, kBlock);
  EXPECT_EQ(ex[0].departure->tier_capacity_bytes, kBlock);
  EXPECT_EQ(ex[0].departed_age_us, 3'000u);
  EXPECT_EQ(ex[1].state, State::kPresent);
  EXPECT_EQ(ex[1].tier, TierId::kHost);
  EXPECT_EQ(ex[2].state, State::kAbsent);
  EXPECT_FALSE(ex[2].departure);
  EXPECT_EQ(store_->departures().recorded(), 1u);
}

TEST_F(StoreExplainTest, RemovalsAndNamespaceDropsAreRecorded) {
  Build({8});
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(PutBlock(n).ok());
  ASSERT_TRUE(store_->Remove(kNs, Key(1)).ok());
  ASSERT_TRUE(store_->DropNamespace(kNs).ok());
  const std::vector<BlockExplanation> ex = Explain({1, 2, 3});
  ASSERT_TRUE(ex[0].departure);
  EXPECT_EQ(ex[0].departure->reason, DepartureReason::kRemoved);
  for (size_t i : {1, 2}) {
    ASSERT_TRUE(ex[i].departure);
    EXPECT_EQ(ex[i].departure->reason, DepartureReason::kNamespaceDropped);
    EXPECT_EQ(ex[i].departure->tier, TierId::kHost);
  }
}

TEST_F(StoreExplainTest, ABlockBeingWrittenIsNotPresentYet) {
  Build({8});
  Result<Reservation> r = store_->BeginPut(kNs, Key(1), kBlock);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Explain({1})[0].state, State::kWriting);
  ASSERT_TRUE(store_->CommitPut(r->id).ok());
  EXPECT_EQ(Explain({1})[0].state, State::kPresent);
}

// SizeOf (STRLEN, MEMORY USAGE): the block's bytes and tier; FootprintOf: what it takes there.
TEST_F(StoreExplainTest, SizeOfGivesTheBlocksBytesAndTierAndFootprintOfWhatItTakesThere) {
  Build({1, 8});
  tiers_.back()->set_block_overhead(100);  // as NVMe adds its record header
  ASSERT_TRUE(PutBlock(1).ok());
  std::optional<StoredSize> size = store_->SizeOf(kNs, Key(1));
  ASSERT_TRUE(size);
  EXPECT_EQ(size->tier, TierId::kHost);
  EXPECT_EQ(size->bytes, kBlock);
  EXPECT_EQ(store_->FootprintOf(size->tier, size->bytes), kBlock);
  ASSERT_TRUE(PutBlock(2).ok());  // moves block 1 down
  size = store_->SizeOf(kNs, Key(1));
  ASSERT_TRUE(size);
  EXPECT_EQ(size->tier, tiers_.back()->id());
  EXPECT_EQ(size->bytes, kBlock);
  EXPECT_EQ(store_->FootprintOf(size->tier, size->bytes), kBlock + 100);
  EXPECT_FALSE(store_->SizeOf(kNs, Key(3)));
  EXPECT_FALSE(store_->SizeOf(NamespaceId{}, Key(1)));  // another namespace's
}

TEST_F(StoreExplainTest, WithoutALogNothingIsRecorded) {
  StoreOptions options;
  options.departure_log_entries = 0;
  Build({1}, /*last_addressable=*/true, options);
  ASSERT_TRUE(PutBlock(1).ok());
  ASSERT_TRUE(PutBlock(2).ok());  // drops block 1
  EXPECT_FALSE(Explain({1})[0].departure);
  EXPECT_EQ(store_->departures().capacity(), 0u);
}

}  // namespace
}  // namespace kvtier::store
