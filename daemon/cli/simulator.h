// Simulate: replays a request trace through an eviction policy, without payload bytes, to measure
// the hit ratio a cache of a given size would have had.
//
// Semantics, per request in trace order:
//   1. hits = the number of leading blocks present on arrival (a block is only useful together
//      with its whole prefix, so presence after the first miss does not count);
//   2. every block of the request is inserted, or touched when present, from the last block to
//      the first, so the prefix's head ends up the most recent (the order the store uses);
//   3. while the cache holds more than `capacity_blocks`, the policy's victim is evicted.
// Before step 3, a policy that may refuse new blocks (EvictionPolicy::AdmitsNew; "sticky") is asked
// while the cache is over capacity; while it refuses, the request's deepest new blocks are taken
// out again (Erase, then NotAdmitted) instead of older residents: what happens in the daemon when
// a put is refused and the client stops putting that request's tail. The policy's clock is the
// trace's timestamps.
// Evicting only after the whole request keeps a request from evicting its own prefix while it is
// being inserted; a request longer than the capacity keeps its head and loses its tail.
//
// An online policy (lru, arc) runs the daemon's own EvictionPolicy classes (daemon/index), the
// ones each tier of its BlockIndex holds, so a policy measured here orders blocks as it does in
// the daemon. The simulator drives the policy directly, not through BlockIndex: with one tier, no
// leases, pins or namespaces, the index's map only mirrors the set of keys the policy tracks, and
// its shard and policy mutexes were most of a run's time for nothing a single thread needs
// (simulator_test checks that both routes give identical counts). "belady" is the offline optimum
// (daemon/cli/belady.h): it reads the whole trace first.
//
// Thread safety: a PolicySimulator is used by one thread at a time; Simulate is a pure function.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/keys.h"
#include "common/status.h"
#include "daemon/cli/trace_reader.h"
#include "daemon/index/eviction_policy.h"

namespace kvtier::cli {

// What a prefix hit saves. Prefilling the first n tokens of a prompt costs
// linear * n + quadratic * n^2: per token, the weight matmuls cost the same at every position
// (the linear term, 2 x parameters FLOPs) while causal attention over the p tokens before it costs
// 4 x layers x model_dim x p FLOPs, which sums to 2 x layers x model_dim x n^2 (the quadratic
// term). So a block's recompute cost is F(end) - F(start), growing linearly with its position, and
// a request whose first t tokens hit saves F(t). The defaults are Llama 3.1 8B's shape in units of
// one token's linear work: quadratic = layers x model_dim / parameters = 32 x 4096 / 8.0e9
// = 1.6e-5, so attention matches the linear work at about 60K tokens of context.
struct PrefillCostModel {
  double linear = 1.0;
  double quadratic = 1.6e-5;

  double PrefixCost(uint64_t tokens) const;  // F(tokens)
};

// The figure a report leads with: block hits, token hits, or prefill cost saved.
enum class Metric : uint8_t { kBlock, kToken, kPrefill };
std::vector<std::string> MetricNames();  // "block", "token", "prefill"
std::string_view MetricName(Metric metric);
// kInvalidArgument for a name not in MetricNames().
Result<Metric> ParseMetric(std::string_view name);

// Policies accepted by Simulate: index::EvictionPolicyNames() and "belady".
std::vector<std::string> SimulationPolicyNames();
inline constexpr std::string_view kBeladyPolicy = "belady";

struct SimulationOptions {
  size_t capacity_blocks = 0;                         // must be at least 1
  std::string policy{index::kDefaultEvictionPolicy};  // see SimulationPolicyNames()
  // Tokens per trace block: converts block hits into token hits (the Mooncake traces use 512).
  uint64_t block_tokens = 512;
  PrefillCostModel cost;
  // false: step 2 below, every block last-first (the head of a prefix ends up the most recent).
  // true: as kvtierd sees a client that looks a prompt up and then puts what was missing in key
  // order: the hit prefix is touched last-first, then the other blocks are touched or inserted
  // first to last, so a request's new blocks end up more recent than its hit prefix. Online
  // policies only (Belady does not order by recency).
  bool key_order_puts = false;
  // "sticky" only: its parameters, as StickyLruPolicy::ParseParams reads them ("quantile=0.8,...");
  // empty: the defaults kvtierd runs.
  std::string policy_params;
};

struct SimulationResult {
  uint64_t requests = 0;
  uint64_t total_blocks = 0;         // block references, summed over requests
  uint64_t hit_blocks = 0;           // leading blocks present on arrival, summed over requests
  uint64_t inserted_blocks = 0;      // block references that were absent and got inserted
  uint64_t not_admitted_blocks = 0;  // absent ones the policy refused (AdmitsNew; "sticky")
  uint64_t evictions = 0;
  uint64_t input_tokens = 0;
  // Per request min(hits * block_tokens, input_tokens): the last block may be partial.
  uint64_t hit_tokens = 0;
  double prefill_cost = 0;        // sum of F(input_tokens) (PrefillCostModel)
  double saved_prefill_cost = 0;  // sum of F(hit tokens)
  // Set by belady only (see belady.h): no policy can hit more blocks than this. Equal to
  // hit_blocks when belady's schedule is the exact optimum.
  std::optional<uint64_t> upper_bound_hit_blocks;

  double block_hit_ratio() const;      // 0 when the trace has no blocks
  double token_hit_ratio() const;      // 0 when the trace has no input tokens
  double saved_prefill_ratio() const;  // 0 when the trace has no prefill cost
  double ratio(Metric metric) const;   // one of the three above

  // Adds one request with `hits` leading blocks present to the counts (not inserted_blocks or
  // evictions, which the caller counts).
  void Count(const TraceRequest& request, uint64_t hits, const SimulationOptions& options);
};

// One online policy fed one request at a time, so that a trace can be streamed from its file.
class PolicySimulator {
 public:
  // kInvalidArgument for a zero capacity, zero block_tokens, a negative or infinite cost term, a
  // policy that is not an online one (belady included: it needs the whole trace, see Simulate).
  // `max_distinct_blocks`, when not 0, is a bound on the number of distinct block ids the trace
  // holds: a capacity above it can never fill, so the policy is not sized for it (a TinyLFU
  // sketch for 10^9 blocks is 8 GB); the counts are the same either way.
  static Result<PolicySimulator> Create(const SimulationOptions& options,
                                        uint64_t max_distinct_blocks = 0);

  void Add(const TraceRequest& request);
  const SimulationResult& result() const { return result_; }

 private:
  PolicySimulator(const SimulationOptions& options, std::unique_ptr<index::EvictionPolicy> policy,
                  std::shared_ptr<uint64_t> now_ms)
      : options_(options), policy_(std::move(policy)), now_ms_(std::move(now_ms)) {}

  SimulationOptions options_;
  std::unique_ptr<index::EvictionPolicy> policy_;
  std::shared_ptr<uint64_t> now_ms_;  // the current request's timestamp: the policy's clock
  std::vector<BlockKey> keys_;        // the current request's keys, reused
  std::vector<size_t> inserted_;      // positions of the keys it inserted, deepest first
  SimulationResult result_;
};

// Checks what every policy needs, and that the options go together (key_order_puts and
// policy_params are for some policies only); kInvalidArgument naming the bad option.
Status ValidateSimulationOptions(const SimulationOptions& options);

// The key a trace id stands for. Trace ids are small sequential integers; the high half gets a
// mixed copy of the id (splitmix64's finaliser), so the shards and hash tables keyed by it spread
// well, while the low half keeps the id itself, which keeps the mapping one-to-one.
BlockKey KeyOfTraceId(uint64_t id);

// Runs the whole trace through options.policy, online or belady. Errors as for
// PolicySimulator::Create, and an unknown policy name is kInvalidArgument.
Result<SimulationResult> Simulate(const std::vector<TraceRequest>& requests,
                                  const SimulationOptions& options);

}  // namespace kvtier::cli
