#include "daemon/cli/belady.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "daemon/cli/trace_test_util.h"

namespace kvtier::cli {
namespace {

using testing::Request;

SimulationResult SimulateBy(const std::vector<TraceRequest>& trace, size_t capacity,
                            const std::string& policy = "belady") {
  auto result = Simulate(trace, {capacity, policy, 512});
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  return result.ok() ? *result : SimulationResult{};
}

// Worked by hand. Capacity 2, one block per request: 1 2 3 1 2. After the third request the cache
// holds 1 2 3; next uses 1 -> request 3, 2 -> request 4, 3 -> never: 3 goes, and both later
// requests hit. LRU evicts 1 there, then 2 when 1 comes back: no hits at all.
TEST(BeladyTest, EvictsTheBlockUsedFarthestInTheFuture) {
  std::vector<TraceRequest> trace = {Request({1}), Request({2}), Request({3}), Request({1}),
                                     Request({2})};
  SimulationResult r = SimulateBy(trace, 2);
  EXPECT_EQ(r.hit_blocks, 2u);
  EXPECT_EQ(r.evictions, 1u);
  EXPECT_EQ(r.upper_bound_hit_blocks, 2u);
  EXPECT_EQ(SimulateBy(trace, 2, "lru").hit_blocks, 0u);
}

// Where prefix semantics matter. Capacity 2: [1 2] [3] [3] [1 2]. After the second request the
// cache holds 1 2 3; 1 and 2 are both next used by request 3, 3 by request 2. Evicting 2 (the
// deeper of the tie) keeps 3 and the prefix [1]: a hit in request 2 and one in request 3.
// Evicting 1 instead would leave 2 without its parent: present, but useless to request 3.
TEST(BeladyTest, TiesGoDeepestFirstSoNoBlockOutlivesItsParent) {
  std::vector<TraceRequest> trace = {Request({1, 2}), Request({3}), Request({3}), Request({1, 2})};
  SimulationResult r = SimulateBy(trace, 2);
  EXPECT_EQ(r.hit_blocks, 2u);
  EXPECT_EQ(r.upper_bound_hit_blocks, 2u);
}

// A block is only used again when its whole prefix is: here [1 2 3] comes back once and [1]
// alone three times, capacity 1: keeping 1 is worth 3 hits, anything deeper at most 0.
TEST(BeladyTest, KeepsTheSharedHeadOverADeepTail) {
  std::vector<TraceRequest> trace = {Request({1, 2, 3}), Request({1}), Request({1}),
                                     Request({1, 2, 3})};
  EXPECT_EQ(SimulateBy(trace, 1).hit_blocks, 3u);
  EXPECT_EQ(SimulateBy(trace, 3).hit_blocks, 2u + 3u);
}

// Block 2 follows 1 in the first request and 3 in the second: the ids do not name prefixes.
// 2 is present but its prefix is not, so the bound (1 present reference) exceeds the hits (0).
TEST(BeladyTest, ATraceWhoseIdsAreNotPrefixesGetsABoundNotAnOptimum) {
  SimulationResult r = SimulateBy({Request({1, 2}), Request({3, 2})}, 10);
  EXPECT_EQ(r.hit_blocks, 0u);
  EXPECT_EQ(r.upper_bound_hit_blocks, 1u);
}

TEST(BeladyTest, ARepeatedIdLeavesNoBound) {
  SimulationResult r = SimulateBy({Request({1, 1}), Request({1, 1})}, 10);
  EXPECT_EQ(r.hit_blocks, 2u);
  EXPECT_FALSE(r.upper_bound_hit_blocks.has_value());
}

TEST(BeladyTest, CountsTokensAndCostOfItsSchedule) {
  SimulationResult r = SimulateBy({Request({1, 2}, 700), Request({1, 2}, 700)}, 10);
  EXPECT_EQ(r.hit_blocks, 2u);
  EXPECT_EQ(r.hit_tokens, 700u);
  EXPECT_DOUBLE_EQ(r.saved_prefill_cost, r.prefill_cost / 2);
}

TEST(BeladyTest, EmptyTraceAndEmptyPromptsCountNothing) {
  SimulationResult r = SimulateBy({}, 10);
  EXPECT_EQ(r.requests, 0u);
  EXPECT_EQ(r.upper_bound_hit_blocks, 0u);
  r = SimulateBy({Request({}, 5), Request({1}), Request({}, 5), Request({1})}, 1);
  EXPECT_EQ(r.requests, 4u);
  EXPECT_EQ(r.hit_blocks, 1u);
}

TEST(BeladyTest, RejectsBadOptions) {
  EXPECT_EQ(Simulate({Request({1})}, {0, "belady", 512}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Simulate({Request({1})}, {1, "belady", 0}).status().code(),
            StatusCode::kInvalidArgument);
}

// ---- Against an exhaustive search ----

// Prefix-hit optimum by trying every choice of blocks to keep after every request (memoised on the
// request index and the kept set). Exponential; only for a handful of blocks.
class BruteForce {
 public:
  BruteForce(const std::vector<TraceRequest>& trace, size_t capacity)
      : trace_(trace), capacity_(capacity) {}
  uint64_t Best(size_t r, const std::set<uint64_t>& kept) {
    if (r == trace_.size()) return 0;
    auto memo = memo_.find({r, kept});
    if (memo != memo_.end()) return memo->second;
    const std::vector<uint64_t>& ids = trace_[r].hash_ids;
    uint64_t hits = 0;
    while (hits < ids.size() && kept.count(ids[hits])) ++hits;
    std::set<uint64_t> candidates = kept;
    candidates.insert(ids.begin(), ids.end());
    std::vector<uint64_t> pool(candidates.begin(), candidates.end());
    const size_t keep = std::min(capacity_, pool.size());
    uint64_t best = 0;
    // Every subset of `pool` of size `keep` (keeping fewer never helps).
    std::vector<bool> pick(pool.size(), false);
    std::fill(pick.begin(), pick.begin() + static_cast<long>(keep), true);
    do {
      std::set<uint64_t> next;
      for (size_t i = 0; i < pool.size(); ++i) {
        if (pick[i]) next.insert(pool[i]);
      }
      best = std::max(best, Best(r + 1, next));
    } while (std::prev_permutation(pick.begin(), pick.end()));
    return memo_[{r, kept}] = hits + best;
  }

 private:
  const std::vector<TraceRequest>& trace_;
  size_t capacity_;
  std::map<std::pair<size_t, std::set<uint64_t>>, uint64_t> memo_;
};

// Requests that walk a random prefix tree: each continues an earlier request's prefix with fresh
// ids, so an id always has the same parent (the Mooncake promise).
std::vector<TraceRequest> PrefixTreeTrace(uint64_t seed, size_t requests, size_t max_new) {
  std::mt19937_64 rng(seed);
  uint64_t next_id = 1;
  std::vector<TraceRequest> trace;
  for (size_t n = 0; n < requests; ++n) {
    std::vector<uint64_t> ids;
    if (!trace.empty() && rng() % 4 != 0) {
      const std::vector<uint64_t>& base = trace[rng() % trace.size()].hash_ids;
      ids.assign(base.begin(), base.begin() + static_cast<long>(rng() % (base.size() + 1)));
    }
    for (uint64_t i = rng() % (max_new + 1); i > 0; --i) ids.push_back(next_id++);
    trace.push_back(Request(std::move(ids)));
  }
  return trace;
}

TEST(BeladyTest, MatchesAnExhaustiveSearchOnSmallPrefixTraces) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    std::vector<TraceRequest> trace = PrefixTreeTrace(seed, 8, 2);
    for (size_t capacity : {1, 2, 3}) {
      SimulationResult r = SimulateBy(trace, capacity);
      EXPECT_EQ(r.hit_blocks, BruteForce(trace, capacity).Best(0, {}))
          << "seed " << seed << ", capacity " << capacity;
      EXPECT_EQ(r.upper_bound_hit_blocks, r.hit_blocks) << "seed " << seed;
    }
  }
}

// ---- The bound holds against the online policies ----

// Checks that belady's schedule is proven exact and hits at least as many blocks as every online
// policy; returns belady's block hits, for the caller's own checks.
uint64_t ExpectAtLeastEveryPolicy(const std::vector<TraceRequest>& trace, size_t capacity) {
  SimulationResult belady = SimulateBy(trace, capacity);
  EXPECT_TRUE(belady.upper_bound_hit_blocks.has_value()) << "capacity " << capacity;
  EXPECT_EQ(belady.upper_bound_hit_blocks, belady.hit_blocks) << "capacity " << capacity;
  for (const std::string& policy : index::EvictionPolicyNames()) {
    SimulationResult online = SimulateBy(trace, capacity, policy);
    EXPECT_GE(belady.hit_blocks, online.hit_blocks) << policy << ", capacity " << capacity;
  }
  return belady.hit_blocks;
}

TEST(BeladyBoundTest, AtLeastEveryPolicyOnRandomPrefixTraces) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    std::vector<TraceRequest> trace = PrefixTreeTrace(seed, 2000, 6);
    for (size_t capacity : {1, 5, 50, 500}) ExpectAtLeastEveryPolicy(trace, capacity);
  }
}

TEST(BeladyBoundTest, AtLeastEveryPolicyOnTheMooncakeTrace) {
  auto trace = testing::MooncakeTraceHead(3000);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  for (size_t capacity : {100, 1000, 5000}) {
    // Hits there are worth something to compare: the slice reuses prefixes at these sizes.
    EXPECT_GT(ExpectAtLeastEveryPolicy(*trace, capacity), 0u);
  }
}

}  // namespace
}  // namespace kvtier::cli
