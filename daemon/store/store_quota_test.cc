// Tenant quotas (Store::SetQuota): a tenant within its quota keeps its blocks whatever another
// tenant puts, a tenant over it gives up its own blocks first, and rules set at run time apply to
// the blocks already stored.
#include <gtest/gtest.h>

#include <cmath>

#include "daemon/store/store.h"
#include "daemon/store/store_test_fixture.h"

namespace kvtier::store {
namespace {

using testing::kBlock;
using testing::Key;
using testing::Payload;
using testing::StoreTest;

const NamespaceId kQuietNs{{0xC1, 1}};
const NamespaceId kNoisyNs{{0xC2, 2}};
const NamespaceId kThirdNs{{0xC3, 3}};

QuotaSubject Tenant(std::string salt) {
  return QuotaSubject{.kind = QuotaSubject::Kind::kTenant, .tenant = std::move(salt)};
}

class StoreQuotaTest : public StoreTest {
 protected:
  // One host tier of `host_blocks` (evictions drop), and three tenants' namespaces.
  void BuildHost(uint64_t host_blocks) {
    Build({host_blocks});
    Register(kQuietNs, "quiet");
    Register(kNoisyNs, "noisy");
  }
  // The accounting identity checked on the store so far, then a new one.
  void Rebuild(uint64_t host_blocks) {
    TearDown();
    store_.reset();
    tiers_.clear();
    BuildHost(host_blocks);
  }
  void Register(const NamespaceId& ns, const std::string& salt) {
    NamespaceInfo info{ns, /*tokens_per_block=*/16, kBlock, salt};
    info.fields = {{"model", "m"}, {"salt", salt}};
    ASSERT_TRUE(store_->RegisterNamespace(info).ok());
  }
  // Block n of namespace `ns`: the index is keyed by block keys alone (real ones chain under the
  // namespace id), so each namespace's keys are kept apart here.
  static BlockKey KeyIn(const NamespaceId& ns, uint64_t n) { return Key(ns.low * 10'000'000 + n); }
  bool Has(const NamespaceId& ns, uint64_t n) {
    std::vector<BlockKey> keys{KeyIn(ns, n)};
    return store_->Lookup(ns, keys).ready_prefix == 1;
  }
  void Put(const NamespaceId& ns, uint64_t n) {
    ASSERT_TRUE(store_->Put(ns, KeyIn(ns, n), Payload(n)).ok()) << "block " << n;
  }
  uint64_t UsedBy(const std::string& salt, TierId tier = TierId::kHost) {
    for (const Store::QuotaReport& r : store_->Quotas()) {
      if (r.subject == Tenant(salt)) return r.used_bytes[static_cast<size_t>(tier)];
    }
    ADD_FAILURE() << "no quota for tenant " << salt;
    return 0;
  }

  // The quiet tenant reads its working set of `working_set` blocks `rounds` times over (a miss is
  // computed again and put), while the noisy tenant, when `noisy`, streams 8 unique blocks
  // between two of its reads. Returns the quiet tenant's hit ratio.
  double QuietHitRatio(uint64_t working_set, int rounds, bool noisy) {
    uint64_t hits = 0;
    uint64_t reads = 0;
    uint64_t next_noisy = 1'000'000;
    for (int round = 0; round < rounds; ++round) {
      for (uint64_t n = 1; n <= working_set; ++n) {
        ++reads;
        std::vector<std::byte> out;
        if (store_->Get(kQuietNs, KeyIn(kQuietNs, n), out).ok()) {
          EXPECT_EQ(out, Payload(n)) << "block " << n;
          ++hits;
        } else {
          Put(kQuietNs, n);
        }
        for (int i = 0; noisy && i < 8; ++i) Put(kNoisyNs, next_noisy++);
      }
    }
    return static_cast<double>(hits) / static_cast<double>(reads);
  }
};

TEST_F(StoreQuotaTest, AQuietTenantWithinItsQuotaHitsAsOftenAsAlone) {
  constexpr uint64_t kHostBlocks = 64;
  constexpr uint64_t kWorkingSet = 20;
  constexpr int kRounds = 10;
  BuildHost(kHostBlocks);
  ASSERT_TRUE(store_->SetQuota(Tenant("quiet"), TierId::kHost, 24 * kBlock).ok());
  const double alone = QuietHitRatio(kWorkingSet, kRounds, /*noisy=*/false);
  EXPECT_DOUBLE_EQ(alone, 0.9);  // every block missed once, in the first round

  // Again from empty, with the noisy tenant streaming through the same host tier.
  Rebuild(kHostBlocks);
  ASSERT_TRUE(store_->SetQuota(Tenant("quiet"), TierId::kHost, 24 * kBlock).ok());
  const double beside_noisy = QuietHitRatio(kWorkingSet, kRounds, /*noisy=*/true);
  EXPECT_LE(std::abs(beside_noisy - alone), 0.01) << "alone " << alone << ", beside the noisy "
                                                  << beside_noisy;
  EXPECT_EQ(UsedBy("quiet"), kWorkingSet * kBlock);
  // The noisy tenant had the rest of the tier.
  EXPECT_EQ(TierStatsOf(store_->Stats(), TierId::kHost).space.used_bytes, kHostBlocks * kBlock);

  // Without the quota the same load evicts the quiet tenant's blocks: the check above can fail.
  Rebuild(kHostBlocks);
  const double unprotected = QuietHitRatio(kWorkingSet, kRounds, /*noisy=*/true);
  EXPECT_LT(unprotected, alone - 0.5) << "without a quota the noisy tenant should evict the quiet";
}

TEST_F(StoreQuotaTest, ATenantOverItsQuotaEvictsItsOwnBlocksFirst) {
  BuildHost(10);
  ASSERT_TRUE(store_->SetQuota(Tenant("quiet"), TierId::kHost, 4 * kBlock).ok());
  ASSERT_TRUE(store_->SetQuota(Tenant("noisy"), TierId::kHost, 4 * kBlock).ok());
  for (uint64_t n = 1; n <= 6; ++n) Put(kNoisyNs, n);  // 2 over, while the tier had room
  for (uint64_t n = 1; n <= 4; ++n) Put(kQuietNs, n);  // the tier is full
  // The noisy tenant puts again: its own oldest block goes.
  Put(kNoisyNs, 7);
  EXPECT_FALSE(Has(kNoisyNs, 1));
  // The quiet tenant, at its quota, puts: the tenant over its quota pays.
  Put(kQuietNs, 5);
  EXPECT_FALSE(Has(kNoisyNs, 2));
  // Now the quiet tenant is over its quota too: its own oldest goes.
  Put(kQuietNs, 6);
  EXPECT_FALSE(Has(kQuietNs, 1));
  for (uint64_t n = 2; n <= 6; ++n) EXPECT_TRUE(Has(kQuietNs, n)) << "quiet block " << n;
  for (uint64_t n = 3; n <= 7; ++n) EXPECT_TRUE(Has(kNoisyNs, n)) << "noisy block " << n;
  EXPECT_EQ(UsedBy("quiet"), 5 * kBlock);
  EXPECT_EQ(UsedBy("noisy"), 5 * kBlock);
}

TEST_F(StoreQuotaTest, WhenOnlyProtectedBlocksAreLeftATenantWithoutAQuotaWaits) {
  BuildHost(8);
  Register(kThirdNs, "third");
  ASSERT_TRUE(store_->SetQuota(Tenant("quiet"), TierId::kHost, 4 * kBlock).ok());
  ASSERT_TRUE(store_->SetQuota(Tenant("noisy"), TierId::kHost, 4 * kBlock).ok());
  for (uint64_t n = 1; n <= 4; ++n) Put(kQuietNs, n);
  for (uint64_t n = 1; n <= 4; ++n) Put(kNoisyNs, n);
  // Every block is within its tenant's quota: a third tenant finds no room.
  EXPECT_EQ(store_->Put(kThirdNs, KeyIn(kThirdNs, 1), Payload(1)).code(), StatusCode::kBusy);
  // A tenant at its quota makes room among its own blocks.
  Put(kQuietNs, 5);
  EXPECT_FALSE(Has(kQuietNs, 1));
  for (uint64_t n = 1; n <= 4; ++n) EXPECT_TRUE(Has(kNoisyNs, n)) << "noisy block " << n;
}

TEST_F(StoreQuotaTest, AQuotaSetAtRunTimeCoversTheBlocksAlreadyStored) {
  BuildHost(8);
  for (uint64_t n = 1; n <= 4; ++n) Put(kQuietNs, n);
  ASSERT_TRUE(store_->SetQuota(Tenant("quiet"), TierId::kHost, 4 * kBlock).ok());
  EXPECT_EQ(UsedBy("quiet"), 4 * kBlock);
  for (uint64_t n = 1; n <= 40; ++n) Put(kNoisyNs, n);
  for (uint64_t n = 1; n <= 4; ++n) EXPECT_TRUE(Has(kQuietNs, n)) << "quiet block " << n;
  // A namespace registered later with the tenant's salt is in its group too.
  Register(kThirdNs, "quiet");
  Put(kThirdNs, 1);
  EXPECT_EQ(UsedBy("quiet"), 5 * kBlock);
  // Cleared, the quota protects nothing: the noisy tenant's stream takes the blocks.
  ASSERT_TRUE(store_->SetQuota(Tenant("quiet"), TierId::kHost, 0).ok());
  for (uint64_t n = 41; n <= 60; ++n) Put(kNoisyNs, n);
  for (uint64_t n = 1; n <= 4; ++n) EXPECT_FALSE(Has(kQuietNs, n)) << "quiet block " << n;
}

TEST_F(StoreQuotaTest, ANamespaceRuleTakesPrecedenceOverItsTenants) {
  BuildHost(8);
  Register(kThirdNs, "quiet");
  ASSERT_TRUE(store_->SetQuota(Tenant("quiet"), TierId::kHost, 2 * kBlock).ok());
  const QuotaSubject third{.kind = QuotaSubject::Kind::kNamespace, .ns = kThirdNs};
  ASSERT_TRUE(store_->SetQuota(third, TierId::kHost, 3 * kBlock).ok());
  Put(kQuietNs, 1);
  for (uint64_t n = 1; n <= 3; ++n) Put(kThirdNs, n);
  EXPECT_EQ(UsedBy("quiet"), kBlock);
  for (const Store::QuotaReport& r : store_->Quotas()) {
    if (r.subject == third) {
      EXPECT_EQ(r.used_bytes[static_cast<size_t>(TierId::kHost)], 3 * kBlock);
    }
  }
  EXPECT_EQ(store_->SetQuota(Tenant("quiet"), TierId::kNvme, kBlock).code(), StatusCode::kNotFound);
}

TEST_F(StoreQuotaTest, RemovedAndDroppedBlocksLeaveTheTenantsCount) {
  BuildHost(8);
  ASSERT_TRUE(store_->SetQuota(Tenant("quiet"), TierId::kHost, 4 * kBlock).ok());
  for (uint64_t n = 1; n <= 3; ++n) Put(kQuietNs, n);
  ASSERT_TRUE(store_->Remove(kQuietNs, KeyIn(kQuietNs, 1)).ok());
  EXPECT_EQ(UsedBy("quiet"), 2 * kBlock);
  ASSERT_TRUE(store_->DropNamespace(kQuietNs).ok());
  EXPECT_EQ(UsedBy("quiet"), 0u);
}

TEST_F(StoreQuotaTest, AFlushAtStopTakesProtectedBlocksToo) {
  Build({4, 8}, /*last_addressable=*/false);
  Register(kQuietNs, "quiet");
  ASSERT_TRUE(store_->SetQuota(Tenant("quiet"), TierId::kHost, 4 * kBlock).ok());
  for (uint64_t n = 1; n <= 2; ++n) Put(kQuietNs, n);
  for (uint64_t n = 1; n <= 2; ++n) ASSERT_TRUE(PutBlock(n).ok());
  const Store::FlushResult r = store_->FlushToNvme(/*deadline_us=*/0);
  EXPECT_EQ(r.written, 4u);
  EXPECT_EQ(r.left, 0u);
}

TEST(QuotaTableTest, GroupsFollowTheRules) {
  QuotaTable table;
  const NamespaceId ns{{1, 1}};
  EXPECT_EQ(table.GroupOf(ns, "acme"), 0);
  Result<uint8_t> tenant = table.Set(Tenant("acme"), TierId::kHost, kBlock);
  ASSERT_TRUE(tenant.ok());
  EXPECT_EQ(table.GroupOf(ns, "acme"), *tenant);
  EXPECT_EQ(table.GroupOf(ns, ""), 0);
  Result<uint8_t> own = table.Set({.kind = QuotaSubject::Kind::kNamespace, .ns = ns},
                                  TierId::kNvme, kBlock);
  ASSERT_TRUE(own.ok());
  EXPECT_NE(*own, *tenant);
  EXPECT_EQ(table.GroupOf(ns, "acme"), *own);
  // Setting a rule again keeps its group; clearing a tier keeps the rule.
  EXPECT_EQ(*table.Set(Tenant("acme"), TierId::kHost, 0), *tenant);
  EXPECT_EQ(table.Rules().size(), 2u);
  for (int i = 0; table.Rules().size() + 1 < index::kMaxQuotaGroups; ++i) {
    ASSERT_TRUE(table.Set(Tenant("t" + std::to_string(i)), TierId::kHost, kBlock).ok());
  }
  EXPECT_EQ(table.Set(Tenant("one-too-many"), TierId::kHost, kBlock).status().code(),
            StatusCode::kRejected);
}

}  // namespace
}  // namespace kvtier::store
