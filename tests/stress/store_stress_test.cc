// Consistency stressor for the store: several threads hammer a small key space with mixed puts,
// reads, lookups, removes and pins while the tiers are far too small for the keys, so eviction
// and demotion run constantly; in the second test a GPU tier sits on top and a mover thread
// promotes every block read, so blocks also move up and back down under the readers; in the third
// the store leaves disk moves to a TierMover (puts and reads answer kPending while it works).
// Every
// payload is derived from its key; every read is verified byte for byte. Any wrong byte,
// unexpected error or broken accounting is a violation.
//
// KVTIER_STRESS_OPS (default 1,000,000) sets the total number of operations.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "daemon/index/eviction_policy.h"
#include "daemon/mover/tier_mover.h"
#include "daemon/store/store.h"
#include "tests/fakes/fake_tier.h"
#include "tiers/gpu/fake_gpu_tier.h"
#include "tiers/host/host_tier.h"

namespace kvtier::store {
namespace {

constexpr uint64_t kBlockBytes = 512;
constexpr uint64_t kKeySpace = 1024;
constexpr int kThreads = 4;
const NamespaceId kNs{{0x5EED, 0x1}};

BlockKey KeyOf(uint64_t n) { return BlockKey{{0xC0FFEE, n}}; }

// Byte i of key n's payload. Mixing n into every byte makes a block served under the wrong key,
// or a torn block of two keys, visible.
std::byte ExpectedByte(uint64_t n, uint64_t i) {
  uint64_t x = (n + 1) * 0x9E3779B97F4A7C15ULL + i * 0xBF58476D1CE4E5B9ULL;
  return static_cast<std::byte>((x >> 29) & 0xff);
}

void Fill(uint64_t n, std::byte* out) {
  for (uint64_t i = 0; i < kBlockBytes; ++i) out[i] = ExpectedByte(n, i);
}

bool Matches(uint64_t n, const std::byte* data) {
  for (uint64_t i = 0; i < kBlockBytes; ++i) {
    if (data[i] != ExpectedByte(n, i)) return false;
  }
  return true;
}

// Leases lapse often, so that readers who outlive them are exercised: their copies may be torn and
// must be dropped at Release. Such a copy races, by design, with the next writer of the slot;
// ThreadSanitizer rightly reports that race, so under TSan leases do not lapse during the run
// (lease expiry is tested deterministically in daemon/store/store_test.cc).
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVTIER_UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(KVTIER_UNDER_TSAN)
constexpr uint64_t kLeaseTimeoutUs = 1'000'000'000'000;
#else
constexpr uint64_t kLeaseTimeoutUs = 1'000;
#endif

uint64_t StressOps() {
  const char* env = std::getenv("KVTIER_STRESS_OPS");
  return env ? std::strtoull(env, nullptr, 10) : 1'000'000;
}

struct Tally {
  std::atomic<uint64_t> violations{0};
  std::atomic<uint64_t> verified_reads{0};
  std::atomic<uint64_t> commits{0};
  std::atomic<uint64_t> busy{0};
  std::atomic<uint64_t> pending{0};  // answered kPending: the mover has the move in hand
};

// kPending is an answer, not a failure, when the store leaves disk moves to a mover.
bool Pending(Tally& tally, StatusCode code) {
  if (code != StatusCode::kPending) return false;
  tally.pending.fetch_add(1);
  return true;
}

// Calls `attempt` again while it answers kPending, as the server does for a client (there with
// a pause that frees the thread), a bounded number of times.
StatusCode CodeOf(const Status& s) { return s.code(); }
template <typename V>
StatusCode CodeOf(const Result<V>& r) {
  return r.status().code();
}

template <typename T>
T UntilNotPending(Tally& tally, const std::function<T()>& attempt) {
  T result = attempt();
  for (int i = 0; i < 100'000 && Pending(tally, CodeOf(result)); ++i) {
    std::this_thread::yield();
    result = attempt();
  }
  return result;
}

void Violation(Tally& tally, const std::string& what) {
  if (tally.violations.fetch_add(1) < 10) ADD_FAILURE() << what;
}

void Worker(Store& store, FakeClock& clock, Tally& tally, uint64_t ops, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> buffer(kBlockBytes);
  for (uint64_t op = 0; op < ops; ++op) {
    const uint64_t n = rng() % kKeySpace;
    const uint32_t dice = rng() % 100;
    if (dice < 35) {  // put through the two-phase path; one in ten is aborted
      Result<Reservation> r = UntilNotPending<Result<Reservation>>(
          tally, [&] { return store.BeginPut(kNs, KeyOf(n), kBlockBytes); });
      if (!r.ok()) {
        StatusCode c = r.status().code();
        if (c == StatusCode::kBusy) tally.busy.fetch_add(1);
        // kRejected: a full tier's policy kept its blocks (sticky, while the tier thrashes).
        if (c != StatusCode::kAlreadyExists && c != StatusCode::kBusy &&
            c != StatusCode::kRejected && !Pending(tally, c)) {
          Violation(tally, "BeginPut: " + r.status().ToString());
        }
        continue;
      }
      Fill(n, r->address);
      Status st = (dice % 10 == 0) ? store.AbortPut(r->id) : store.CommitPut(r->id);
      // A commit may find its reservation expired (the clock moves); anything else is a bug.
      if (!st.ok() && st.code() != StatusCode::kNotFound)
        Violation(tally, "finish put: " + st.ToString());
      if (st.ok() && dice % 10 != 0) tally.commits.fetch_add(1);
    } else if (dice < 70) {  // leased zero-copy read, or copy-out read
      if (dice < 55) {
        Result<Lease> lease =
            UntilNotPending<Result<Lease>>(tally, [&] { return store.Acquire(kNs, KeyOf(n)); });
        if (!lease.ok()) {
          if (lease.status().code() != StatusCode::kNotFound &&
              !Pending(tally, lease.status().code())) {
            Violation(tally, "Acquire: " + lease.status().ToString());
          }
          continue;
        }
        // Copy out, then release. A lease that timed out meanwhile answers kNotFound at Release:
        // the copy may be torn and is discarded, exactly as a client must do. Only a copy made
        // under a lease that was still valid at Release is checked.
        Status read = Status::Ok();
        if (lease->address != nullptr) {
          std::memcpy(buffer.data(), lease->address, kBlockBytes);
        } else {
          read = store.tier(lease->tier)->Read(lease->extent, buffer);
        }
        Status released = store.Release(lease->id);
        if (!read.ok()) Violation(tally, "Read of a leased block failed: " + read.ToString());
        if (released.ok()) {
          if (!Matches(n, buffer.data()))
            Violation(tally, "wrong bytes for key " + std::to_string(n));
          tally.verified_reads.fetch_add(1);
        } else if (released.code() != StatusCode::kNotFound) {
          Violation(tally, "Release: " + released.ToString());
        }
      } else {
        std::vector<std::byte> out;
        Status st = UntilNotPending<Status>(tally, [&] { return store.Get(kNs, KeyOf(n), out); });
        if (st.ok()) {
          if (out.size() != kBlockBytes || !Matches(n, out.data())) {
            Violation(tally, "Get returned wrong bytes for key " + std::to_string(n));
          }
          tally.verified_reads.fetch_add(1);
        } else if (st.code() != StatusCode::kNotFound && !Pending(tally, st.code())) {
          Violation(tally, "Get: " + st.ToString());
        }
      }
    } else if (dice < 85) {  // lookup of a chain of 8 consecutive keys
      std::vector<BlockKey> chain;
      for (uint64_t i = 0; i < 8; ++i) chain.push_back(KeyOf((n + i) % kKeySpace));
      index::LookupResult r = store.Lookup(kNs, chain);
      if (r.tiers.size() != r.ready_prefix || r.ready_prefix > chain.size()) {
        Violation(tally, "Lookup result is inconsistent");
      }
    } else if (dice < 95) {  // remove
      Status st = store.Remove(kNs, KeyOf(n));
      if (!st.ok() && st.code() != StatusCode::kNotFound && st.code() != StatusCode::kBusy) {
        Violation(tally, "Remove: " + st.ToString());
      }
    } else if (dice < 98) {  // pin briefly
      Status st = store.Pin(kNs, KeyOf(n), 50);
      if (!st.ok() && st.code() != StatusCode::kNotFound) Violation(tally, "Pin: " + st.ToString());
    } else {  // time passes: pins lapse, slow leases and reservations are taken back
      clock.AdvanceMicros(20);
      store.ExpireDeadlines();
    }
  }
}

Result<std::unique_ptr<tiers::HostTier>> SmallHostTier() {
  return tiers::HostTier::Create({.capacity_bytes = 128 * kBlockBytes,
                                  .slab_bytes = 16 * kBlockBytes,
                                  .alignment = 512,
                                  .try_huge_pages = false,
                                  .try_mlock = false});
}

StoreOptions StressOptions() {
  StoreOptions options;
  // Reservations do not lapse during the run. Here the clock jumps while a writer sleeps, and a
  // writer that overstays its reservation and the quarantine after it may write into a slot that
  // belongs to another block by then (the documented contract of the shared-memory path); expiry
  // and quarantine are tested deterministically in daemon/store/store_test.cc.
  options.lease_timeout_us = kLeaseTimeoutUs;
  options.reservation_timeout_us = 1'000'000'000'000;
  return options;
}

// Runs the workers (and `mover` beside them, until they finish), calls `quiesce` (which stops
// any other thread that moves blocks: a block counts in two tiers while it moves), lets every
// lease and reservation lapse, and checks the books.
StoreStats RunAndCheck(Store& store, FakeClock& clock, const std::function<void()>& mover = {},
                       const std::function<void()>& quiesce = {}) {
  const uint64_t total = StressOps();
  Tally tally;
  std::atomic<bool> done{false};
  std::thread mover_thread;
  if (mover) {
    mover_thread = std::thread([&] {
      while (!done.load()) mover();
    });
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back(Worker, std::ref(store), std::ref(clock), std::ref(tally),
                         total / kThreads, 1234 + t);
  }
  for (auto& t : threads) t.join();
  done.store(true);
  if (mover_thread.joinable()) mover_thread.join();
  if (quiesce) quiesce();

  clock.AdvanceMicros(10'000);
  store.ExpireDeadlines();
  StoreStats s = store.Stats();
  EXPECT_EQ(tally.violations.load(), 0u);
  EXPECT_GT(tally.verified_reads.load(), total / 20);
  EXPECT_GT(s.evicted_blocks, 0u);
  EXPECT_EQ(s.committed_puts, s.blocks_present + s.evicted_blocks + s.removed_blocks);
  EXPECT_EQ(s.committed_puts, tally.commits.load());
  EXPECT_EQ(s.blocks_writing, 0u);
  EXPECT_EQ(s.blocks_quarantined, 0u);
  EXPECT_EQ(s.leases_active, 0u);
  uint64_t tier_blocks = 0;
  for (const TierStatsSnapshot& t : s.tiers) tier_blocks += t.space.block_count;
  // A block read up from NVMe may keep its copy there (StoreOptions::nvme_copy_share).
  EXPECT_EQ(tier_blocks, s.blocks_present + s.blocks_shadowed);
  std::printf(
      "stress: %llu ops, %llu verified reads, %llu commits, %llu evicted, %llu busy, "
      "%llu pending, 0 violations expected, %llu seen\n",
      static_cast<unsigned long long>(total),
      static_cast<unsigned long long>(tally.verified_reads.load()),
      static_cast<unsigned long long>(s.committed_puts),
      static_cast<unsigned long long>(s.evicted_blocks),
      static_cast<unsigned long long>(tally.busy.load()),
      static_cast<unsigned long long>(tally.pending.load()),
      static_cast<unsigned long long>(tally.violations.load()));
  return s;
}

TEST(StoreStressTest, MixedOperationsNeverServeWrongBytesAndAccountingHolds) {
  auto host = SmallHostTier();
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  // A second, smaller tier that is not plain memory, so demotion and tier reads are exercised.
  testing::FakeTier cold(TierId::kNvme, 256 * kBlockBytes, /*addressable=*/false);
  FakeClock clock;
  auto store = Store::Create(StressOptions(), {host->get(), &cold}, clock);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->RegisterNamespace({kNs, 16, kBlockBytes, "stress"}).ok());
  const StoreStats s = RunAndCheck(**store, clock);
  EXPECT_GT(s.tiers[0].demotions, 0u);
  EXPECT_EQ(cold.bad_frees(), 0u);
}

// The same run with each other eviction policy ordering both tiers: the store's eviction,
// demotion and lease skipping go through EvictionPolicy alone, so any policy must keep the books.
class StoreStressPolicyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StoreStressPolicyTest, MixedOperationsNeverServeWrongBytesAndAccountingHolds) {
  auto host = SmallHostTier();
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  testing::FakeTier cold(TierId::kNvme, 256 * kBlockBytes, /*addressable=*/false);
  FakeClock clock;
  StoreOptions options = StressOptions();
  options.index.policy = GetParam();
  auto store = Store::Create(options, {host->get(), &cold}, clock);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->RegisterNamespace({kNs, 16, kBlockBytes, "stress"}).ok());
  const StoreStats s = RunAndCheck(**store, clock);
  EXPECT_GT(s.tiers[0].demotions, 0u);
  EXPECT_EQ(cold.bad_frees(), 0u);
}

std::vector<std::string> PoliciesOtherThanTheDefault() {
  std::vector<std::string> names = index::EvictionPolicyNames();
  names.erase(names.begin());  // the default, which every other test here runs
  return names;
}

INSTANTIATE_TEST_SUITE_P(OtherPolicies, StoreStressPolicyTest,
                         ::testing::ValuesIn(PoliciesOtherThanTheDefault()),
                         [](const auto& info) { return info.param; });

TEST(StoreStressTest, BlocksMovingThroughAGpuTierUnderReadersKeepTheirBytes) {
  auto gpu = tiers::FakeGpuTier::Create({.fake = true,
                                         .capacity_bytes = 32 * kBlockBytes,
                                         .slab_bytes = 16 * kBlockBytes,
                                         .alignment = 512});
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  auto host = SmallHostTier();
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  testing::FakeTier cold(TierId::kNvme, 256 * kBlockBytes, /*addressable=*/false);
  FakeClock clock;
  StoreOptions options = StressOptions();
  options.gpu_promotion = {"reads", 1, 1'000'000};  // every read: the most movement
  auto store = Store::Create(options, {gpu->get(), host->get(), &cold}, clock);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->RegisterNamespace({kNs, 16, kBlockBytes, "stress"}).ok());
  Store& s = **store;
  const StoreStats stats = RunAndCheck(s, clock, [&s] { s.PromoteCandidates(64); });
  EXPECT_GT(stats.tiers[1].promotions, 0u);  // host -> GPU
  EXPECT_GT(stats.tiers[0].demotions, 0u);   // GPU -> host
  EXPECT_EQ((*gpu)->invalid_free_count(), 0u);
  EXPECT_EQ(cold.bad_frees(), 0u);
}

// The same load with disk moves left to a TierMover; `drop_when_disk_lags`: puts that outrun it
// drop cold host blocks instead of waiting for it.
void RunWithATierMover(bool drop_when_disk_lags) {
  auto host = SmallHostTier();
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  testing::FakeTier cold(TierId::kNvme, 256 * kBlockBytes, /*addressable=*/false);
  FakeClock clock;
  StoreOptions options = StressOptions();
  options.background_disk_moves = true;
  options.drop_when_disk_lags = drop_when_disk_lags;
  auto store = Store::Create(options, {host->get(), &cold}, clock);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->RegisterNamespace({kNs, 16, kBlockBytes, "stress"}).ok());
  Store& s = **store;
  mover::TierMover::Options mover_options;
  mover_options.threads = 2;
  mover_options.tick = std::chrono::milliseconds(1);
  auto mover = std::make_unique<mover::TierMover>(s, mover_options);
  s.SetMoverWakeup([m = mover.get()] { m->Wake(); });
  const StoreStats stats = RunAndCheck(s, clock, {}, [&] {
    s.SetMoverWakeup({});
    mover.reset();
  });
  EXPECT_GT(stats.tiers[0].demotions, 0u);   // host -> NVMe, by the mover
  EXPECT_GT(stats.tiers[1].promotions, 0u);  // NVMe -> host, fetched for readers
  EXPECT_EQ(cold.bad_frees(), 0u);
}

TEST(StoreStressTest, WithDiskMovesLeftToATierMoverNothingIsLostOrWrong) {
  RunWithATierMover(/*drop_when_disk_lags=*/false);
}

TEST(StoreStressTest, WithPutsDroppingWhatTheTierMoverHasNotWrittenNothingIsLostOrWrong) {
  RunWithATierMover(/*drop_when_disk_lags=*/true);
}

}  // namespace
}  // namespace kvtier::store
