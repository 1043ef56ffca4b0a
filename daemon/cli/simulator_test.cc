#include "daemon/cli/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <span>

#include "daemon/cli/trace_test_util.h"
#include "daemon/index/block_index.h"
#include "daemon/index/eviction_policy.h"

namespace kvtier::cli {
namespace {

using testing::Request;

SimulationResult SimulateOrFail(const std::vector<TraceRequest>& trace, size_t capacity,
                                const std::string& policy = "lru", uint64_t block_tokens = 512) {
  auto result = Simulate(trace, {capacity, policy, block_tokens});
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  return result.ok() ? *result : SimulationResult{};
}

// Worked by hand. Capacity 3, LRU, most recent first:
//   [1,2,3]: 0 hits; 3,2,1 inserted -> (1 2 3).
//   [1,2,4]: 2 hits; 4 inserted, 2 and 1 touched -> (1 2 4 3); 3 evicted.
//   [1,2,3]: 2 hits; 3 inserted -> (1 2 3 4); 4 evicted.
TEST(SimulateTest, HandWorkedLruTrace) {
  std::vector<TraceRequest> trace = {Request({1, 2, 3}, 1536), Request({1, 2, 4}, 1500),
                                     Request({1, 2, 3}, 1100)};
  SimulationResult r = SimulateOrFail(trace, 3);
  EXPECT_EQ(r.requests, 3u);
  EXPECT_EQ(r.total_blocks, 9u);
  EXPECT_EQ(r.hit_blocks, 4u);
  EXPECT_EQ(r.inserted_blocks, 5u);
  EXPECT_EQ(r.evictions, 2u);
  EXPECT_EQ(r.input_tokens, 1536u + 1500u + 1100u);
  EXPECT_EQ(r.hit_tokens, 1024u + 1024u);
  EXPECT_DOUBLE_EQ(r.block_hit_ratio(), 4.0 / 9.0);
  EXPECT_DOUBLE_EQ(r.token_hit_ratio(), 2048.0 / 4136.0);
}

TEST(SimulateTest, OnlyTheLeadingPresentBlocksHit) {
  // 6 is present for the second request, but its first block 7 is not.
  SimulationResult r = SimulateOrFail({Request({5, 6}), Request({7, 6})}, 100);
  EXPECT_EQ(r.hit_blocks, 0u);
  EXPECT_EQ(r.inserted_blocks, 3u);
}

TEST(SimulateTest, HitTokensStopAtThePromptLength) {
  // Two blocks hit, but the prompt is only 700 tokens long (its second block is partial).
  SimulationResult r = SimulateOrFail({Request({1, 2}, 700), Request({1, 2}, 700)}, 10);
  EXPECT_EQ(r.hit_blocks, 2u);
  EXPECT_EQ(r.hit_tokens, 700u);
}

TEST(SimulateTest, BlockTokensScaleTokenHits) {
  SimulationResult r =
      SimulateOrFail({Request({1, 2, 3}, 10000), Request({1, 2, 9}, 10000)}, 10, "lru", 16);
  EXPECT_EQ(r.hit_blocks, 2u);
  EXPECT_EQ(r.hit_tokens, 32u);
}

TEST(SimulateTest, RequestLongerThanTheCapacityKeepsItsHead) {
  SimulationResult r = SimulateOrFail({Request({1, 2, 3, 4}), Request({1, 2, 3})}, 2);
  EXPECT_EQ(r.evictions, 2u + 1u);  // 3 and 4, then 3 again
  EXPECT_EQ(r.hit_blocks, 2u);
}

// 32 chains of 64 blocks, read in turn 40 times, a request a second: a loop of 2,048 blocks.
std::vector<TraceRequest> LoopTrace() {
  std::vector<TraceRequest> trace;
  for (uint64_t round = 0; round < 40; ++round) {
    for (uint64_t chain = 0; chain < 32; ++chain) {
      std::vector<uint64_t> ids;
      for (uint64_t b = 0; b < 64; ++b) ids.push_back(chain * 64 + b);
      TraceRequest request = Request(ids);
      request.timestamp_ms = (round * 32 + chain) * 1000;
      trace.push_back(request);
    }
  }
  return trace;
}

// The loop through a cache of half of it: LRU evicts each prefix just before it comes back and
// never hits after the first round; sticky refuses the new tails (not_admitted_blocks) and keeps
// hitting the prefixes it holds.
TEST(SimulateTest, StickyKeepsPartOfALoopLargerThanTheCache) {
  const std::vector<TraceRequest> trace = LoopTrace();
  const SimulationResult lru = SimulateOrFail(trace, 1024, "lru");
  const SimulationResult sticky = SimulateOrFail(trace, 1024, "sticky");
  EXPECT_EQ(lru.hit_blocks, 0u);
  EXPECT_EQ(lru.not_admitted_blocks, 0u);
  EXPECT_GT(sticky.not_admitted_blocks, 0u);
  EXPECT_GT(sticky.block_hit_ratio(), 0.3);
}

// The same loop with a margin no duel can win: sticky never protects, and is LRU.
TEST(SimulateTest, PolicyParamsReachTheStickyPolicy) {
  const std::vector<TraceRequest> trace = LoopTrace();
  SimulationOptions options{1024, "sticky", 512};
  options.policy_params = "margin=1000000";
  Result<SimulationResult> r = Simulate(trace, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hit_blocks, 0u);
  EXPECT_EQ(r->not_admitted_blocks, 0u);
  options.policy_params = "margin=2";  // the default: as StickyKeepsPartOfALoopLargerThanTheCache
  EXPECT_GT(Simulate(trace, options)->block_hit_ratio(), 0.3);
}

TEST(SimulateTest, RejectsPolicyParamsOfOtherPoliciesAndBadOnes) {
  const std::vector<TraceRequest> trace = {Request({1})};
  SimulationOptions options{10, "lru", 512};
  options.policy_params = "margin=1";
  EXPECT_EQ(Simulate(trace, options).status().code(), StatusCode::kInvalidArgument);
  options.policy = "sticky";
  options.policy_params = "margin=-1";
  EXPECT_EQ(Simulate(trace, options).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PolicySimulator::Create(options).status().code(), StatusCode::kInvalidArgument);
}

// [1 2] then [1 2 3]: last-first leaves 1 the most recent and 3 the least, key order leaves 3 the
// most recent and 2 the least. [5] then evicts 3 or 2, and [1 2 3] hits 2 or 1.
TEST(SimulateTest, KeyOrderPutsLeaveNewBlocksMoreRecentThanTheHitPrefix) {
  const std::vector<TraceRequest> trace{Request({1, 2}), Request({1, 2, 3}), Request({5}),
                                        Request({1, 2, 3})};
  SimulationOptions options{3, "lru", 512};
  EXPECT_EQ(Simulate(trace, options)->hit_blocks, 2u + 2u);
  options.key_order_puts = true;
  EXPECT_EQ(Simulate(trace, options)->hit_blocks, 2u + 1u);
}

// Regression: belady accepted key_order_puts, ignored it, and the report said put_order "key".
TEST(SimulateTest, RejectsKeyOrderPutsForBelady) {
  SimulationOptions options{10, "belady", 512};
  options.key_order_puts = true;
  EXPECT_EQ(Simulate({Request({1})}, options).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSimulationOptions(options).code(), StatusCode::kInvalidArgument);
  options.policy = "lru";
  EXPECT_TRUE(ValidateSimulationOptions(options).ok());
}

TEST(SimulateTest, RepeatedIdInOneRequestIsInsertedOnce) {
  SimulationResult r = SimulateOrFail({Request({1, 1, 2})}, 10);
  EXPECT_EQ(r.inserted_blocks, 2u);
  EXPECT_EQ(r.hit_blocks, 0u);
}

TEST(SimulateTest, EmptyTraceHasZeroRatios) {
  SimulationResult r = SimulateOrFail({}, 10);
  EXPECT_EQ(r.requests, 0u);
  EXPECT_EQ(r.block_hit_ratio(), 0.0);
  EXPECT_EQ(r.token_hit_ratio(), 0.0);
}

TEST(SimulateTest, RejectsBadOptions) {
  std::vector<TraceRequest> trace = {Request({1})};
  EXPECT_EQ(Simulate(trace, {0, "lru", 512}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Simulate(trace, {10, "lru", 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Simulate(trace, {10, "nope", 512}).status().code(), StatusCode::kInvalidArgument);
}

// ---- LRU against an independent reference ----

struct Counts {
  uint64_t hit_blocks = 0;
  uint64_t hit_tokens = 0;
  uint64_t evictions = 0;
  bool operator==(const Counts&) const = default;
};

// The reference: LRU as a plain vector of (id, time of last use), searched linearly, evicting the
// smallest time. Obviously correct, obviously slow, and shares no code with the index or policies.
Counts ReferenceLru(const std::vector<TraceRequest>& trace, size_t capacity,
                    uint64_t block_tokens = 512) {
  struct Entry {
    uint64_t id;
    uint64_t last_use;
  };
  std::vector<Entry> cache;
  uint64_t now = 0;
  Counts counts;
  auto find = [&cache](uint64_t id) -> Entry* {
    for (Entry& e : cache) {
      if (e.id == id) return &e;
    }
    return nullptr;
  };
  for (const TraceRequest& request : trace) {
    const std::vector<uint64_t>& ids = request.hash_ids;
    uint64_t hits = 0;
    while (hits < ids.size() && find(ids[hits]) != nullptr) ++hits;
    for (size_t i = ids.size(); i-- > 0;) {
      ++now;
      if (Entry* e = find(ids[i])) {
        e->last_use = now;
      } else {
        cache.push_back({ids[i], now});
      }
    }
    while (cache.size() > capacity) {
      auto oldest =
          std::min_element(cache.begin(), cache.end(),
                           [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
      cache.erase(oldest);
      ++counts.evictions;
    }
    counts.hit_blocks += hits;
    counts.hit_tokens += std::min(hits * block_tokens, request.input_tokens);
  }
  return counts;
}

Counts CountsOf(const SimulationResult& r) { return {r.hit_blocks, r.hit_tokens, r.evictions}; }

// Conversation-shaped random traces: a request continues an earlier one (a prefix of it plus new
// blocks) or starts from one of a few shared system prompts; now and then an id repeats inside a
// request or an old id appears mid-prompt, so presence after a miss is exercised too.
std::vector<TraceRequest> RandomTrace(uint64_t seed, size_t requests) {
  std::mt19937_64 rng(seed);
  uint64_t next_id = 1000;
  std::vector<TraceRequest> trace;
  for (size_t n = 0; n < requests; ++n) {
    std::vector<uint64_t> ids;
    if (!trace.empty() && rng() % 2 == 0) {
      const std::vector<uint64_t>& base = trace[rng() % trace.size()].hash_ids;
      ids.assign(base.begin(), base.begin() + static_cast<long>(rng() % (base.size() + 1)));
    } else {
      const uint64_t system_prompt = rng() % 4;
      for (uint64_t i = 0; i < rng() % 3; ++i) ids.push_back(system_prompt * 10 + i);
    }
    for (uint64_t i = rng() % 8; i > 0; --i) ids.push_back(next_id++);
    if (!ids.empty() && rng() % 20 == 0) ids.push_back(ids[rng() % ids.size()]);
    if (rng() % 20 == 0) ids.push_back(1000 + rng() % (next_id - 999));
    trace.push_back(Request(std::move(ids), 1 + rng() % 5000));
  }
  return trace;
}

TEST(SimulateLruReferenceTest, MatchesReferenceOnRandomTraces) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::vector<TraceRequest> trace = RandomTrace(seed, 400);
    for (size_t capacity : {1, 2, 5, 17, 60, 250, 5000}) {
      ASSERT_EQ(CountsOf(SimulateOrFail(trace, capacity)), ReferenceLru(trace, capacity))
          << "seed " << seed << ", capacity " << capacity;
    }
  }
}

TEST(SimulateLruReferenceTest, MatchesReferenceOnTheMooncakeTrace) {
  auto trace = testing::MooncakeTraceHead(2000);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  for (size_t capacity : {100, 1000, 3000}) {
    SimulationResult r = SimulateOrFail(*trace, capacity);
    EXPECT_EQ(CountsOf(r), ReferenceLru(*trace, capacity)) << "capacity " << capacity;
    EXPECT_GT(r.hit_blocks, 0u);
    EXPECT_GT(r.evictions, 0u);
  }
}

// ---- The simulator against the daemon's BlockIndex ----

// The simulator as it was before it drove the policies directly: every step through the daemon's
// BlockIndex (InsertReady, a touching one-key Lookup, PickVictim and Erase). Kept here so that
// the two routes are shown to count the same.
Counts ThroughBlockIndex(const std::vector<TraceRequest>& trace, size_t capacity,
                         const std::string& policy) {
  index::BlockIndex::Options options;
  options.policy = policy;
  options.capacity_hint_blocks = capacity;
  auto created = index::BlockIndex::Create(options);
  EXPECT_TRUE(created.ok());
  if (!created.ok()) return {};
  index::BlockIndex& index = **created;
  Counts counts;
  std::vector<BlockKey> keys;
  for (const TraceRequest& request : trace) {
    keys.clear();
    for (uint64_t id : request.hash_ids) keys.push_back(KeyOfTraceId(id));
    const uint64_t hits = index.Lookup(keys, /*touch=*/false).ready_prefix;
    for (size_t i = keys.size(); i-- > 0;) {
      if (index.Lookup(std::span(keys).subspan(i, 1), /*touch=*/true).ready_prefix == 1) continue;
      EXPECT_TRUE(index.InsertReady(keys[i], index::BlockMeta{}).ok());
    }
    while (index.size() > capacity) {
      auto victim = index.PickVictim(TierId::kHost, /*now_us=*/0);
      if (!victim) break;
      index.Erase(victim->first);
      ++counts.evictions;
    }
    counts.hit_blocks += hits;
    counts.hit_tokens += std::min(hits * 512, request.input_tokens);
  }
  return counts;
}

TEST(SimulateBlockIndexTest, DrivingThePolicyDirectlyCountsAsTheIndexDoes) {
  for (const std::string& policy : index::EvictionPolicyNames()) {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      std::vector<TraceRequest> trace = RandomTrace(seed, 1000);
      for (size_t capacity : {1, 7, 60, 400}) {
        ASSERT_EQ(CountsOf(SimulateOrFail(trace, capacity, policy)),
                  ThroughBlockIndex(trace, capacity, policy))
            << policy << ", seed " << seed << ", capacity " << capacity;
      }
    }
  }
}

TEST(SimulatePolicySimulatorTest, StreamingMatchesTheWholeTrace) {
  std::vector<TraceRequest> trace = RandomTrace(7, 500);
  SimulationOptions options{50, "arc", 512};
  auto simulator = PolicySimulator::Create(options);
  ASSERT_TRUE(simulator.ok()) << simulator.status().ToString();
  for (const TraceRequest& request : trace) simulator->Add(request);
  EXPECT_EQ(CountsOf(simulator->result()), CountsOf(SimulateOrFail(trace, 50, "arc")));
  options.policy = "belady";
  EXPECT_EQ(PolicySimulator::Create(options).status().code(), StatusCode::kInvalidArgument);
}

// Regression: the policy was sized for the capacity even when the trace could never fill it;
// tinylfu's sketch, 8 bytes a block, took 8 GB at 10^9 blocks and died of bad_alloc at 10^10. A
// capacity beyond what the trace can fill now counts as one that just holds all of it, whole or
// streamed.
TEST(SimulateAllPoliciesTest, ACapacityTheTraceCannotFillCountsAsOneThatHoldsItAll) {
  const std::vector<TraceRequest> trace = RandomTrace(5, 300);
  uint64_t block_references = 0;
  for (const TraceRequest& request : trace) block_references += request.hash_ids.size();
  constexpr size_t kHuge = size_t{1} << 40;
  for (const std::string& policy : index::EvictionPolicyNames()) {
    const SimulationResult holds_all = SimulateOrFail(trace, block_references, policy);
    EXPECT_EQ(holds_all.evictions, 0u) << policy;
    EXPECT_EQ(CountsOf(SimulateOrFail(trace, kHuge, policy)), CountsOf(holds_all)) << policy;
    auto simulator = PolicySimulator::Create({kHuge, policy, 512}, block_references);
    ASSERT_TRUE(simulator.ok()) << simulator.status().ToString();
    for (const TraceRequest& request : trace) simulator->Add(request);
    EXPECT_EQ(CountsOf(simulator->result()), CountsOf(holds_all)) << policy;
  }
}

// ---- The prefill cost metric ----

TEST(PrefillCostTest, PrefixCostIsLinearPlusQuadratic) {
  PrefillCostModel model{2.0, 0.5};
  EXPECT_DOUBLE_EQ(model.PrefixCost(0), 0.0);
  EXPECT_DOUBLE_EQ(model.PrefixCost(10), 2.0 * 10 + 0.5 * 100);
}

// Worked by hand: block_tokens 512, F(n) = n + 0.001 n^2. The second request hits one block of a
// 1000-token prompt: it saves F(512) = 512 + 262.144 of F(1000) = 2000.
TEST(PrefillCostTest, SavedCostIsTheCostOfTheHitPrefix) {
  SimulationOptions options{10, "lru", 512, {1.0, 0.001}};
  auto r = Simulate({Request({1}, 512), Request({1, 2}, 1000)}, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->saved_prefill_cost, 774.144);
  EXPECT_DOUBLE_EQ(r->prefill_cost, 774.144 + 2000.0);
  EXPECT_DOUBLE_EQ(r->saved_prefill_ratio(), 774.144 / 2774.144);
  EXPECT_DOUBLE_EQ(r->ratio(Metric::kPrefill), r->saved_prefill_ratio());
  EXPECT_DOUBLE_EQ(r->ratio(Metric::kBlock), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(r->ratio(Metric::kToken), 512.0 / 1512.0);
}

// With a quadratic term, a deep block saved is worth more than a shallow one: two traces with the
// same block and token hits, one hitting late in its prompts, save different costs.
TEST(PrefillCostTest, DeepHitsSaveMoreThanShallowOnesWithTheSameTokens) {
  SimulationOptions options{10, "lru", 512, {1.0, 1.6e-5}};
  // Shallow: four hits of a 1-block prompt. Deep: one hit of a 4-block prompt.
  auto shallow =
      Simulate({Request({1}), Request({1}), Request({1}), Request({1}), Request({1})}, options);
  auto deep = Simulate({Request({1, 2, 3, 4}), Request({1, 2, 3, 4})}, options);
  ASSERT_TRUE(shallow.ok() && deep.ok());
  EXPECT_EQ(shallow->hit_tokens, deep->hit_tokens);  // 4 blocks each
  EXPECT_GT(deep->saved_prefill_cost, shallow->saved_prefill_cost);
  options.cost = {1.0, 0.0};  // without attention the two are worth the same
  shallow =
      Simulate({Request({1}), Request({1}), Request({1}), Request({1}), Request({1})}, options);
  deep = Simulate({Request({1, 2, 3, 4}), Request({1, 2, 3, 4})}, options);
  EXPECT_DOUBLE_EQ(deep->saved_prefill_cost, shallow->saved_prefill_cost);
}

TEST(PrefillCostTest, RejectsNegativeTermsAndUnknownMetrics) {
  EXPECT_EQ(Simulate({Request({1})}, {10, "lru", 512, {-1.0, 0.0}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Simulate({Request({1})}, {10, "belady", 512, {1.0, -1.0}}).status().code(),
            StatusCode::kInvalidArgument);
  // Regression: an infinite term passed, and made every total infinite.
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(Simulate({Request({1})}, {10, "lru", 512, {inf, 0.0}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Simulate({Request({1})}, {10, "belady", 512, {1.0, inf}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseMetric("prefill").value(), Metric::kPrefill);
  EXPECT_EQ(ParseMetric("bytes").status().code(), StatusCode::kInvalidArgument);
  for (const std::string& name : MetricNames()) {
    EXPECT_EQ(MetricName(ParseMetric(name).value()), name);
  }
}

// Properties every policy must keep, whatever its order.
TEST(SimulateAllPoliciesTest, StayWithinCapacityAndCountConsistently) {
  std::vector<TraceRequest> trace = RandomTrace(99, 2000);
  for (const std::string& policy : SimulationPolicyNames()) {
    for (size_t capacity : {1, 10, 100, 1000}) {
      SimulationResult r = SimulateOrFail(trace, capacity, policy);
      EXPECT_EQ(r.requests, trace.size());
      EXPECT_LE(r.inserted_blocks - r.evictions, capacity) << policy;  // final size
      EXPECT_LE(r.hit_blocks, r.total_blocks - r.inserted_blocks) << policy;
      EXPECT_LE(r.hit_tokens, r.input_tokens) << policy;
    }
  }
}

}  // namespace
}  // namespace kvtier::cli
