#include "daemon/cli/simulator.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "daemon/cli/belady.h"
#include "daemon/index/sticky_lru_policy.h"

namespace kvtier::cli {
namespace {

constexpr std::string_view kMetricNames[] = {"block", "token", "prefill"};

double Ratio(double part, double whole) { return whole == 0 ? 0.0 : part / whole; }

// The capacity a policy is built for. Policies size tables by it (TinyLFU's sketch, 8 bytes per
// block, allocated at the first insert), which a capacity the trace cannot fill only wastes: with
// at most `max_distinct_blocks` distinct blocks the cache never goes over capacity, the policy is
// never asked for a victim or an admission, and its sizing cannot change a count. It is then
// built without a hint, following the largest size seen, as a daemon's policy does when it is not
// told its tier's size, so memory follows the trace rather than the flag.
size_t PolicyCapacityHint(size_t capacity_blocks, uint64_t max_distinct_blocks) {
  if (max_distinct_blocks != 0 && capacity_blocks > max_distinct_blocks) return 0;
  return capacity_blocks;
}

}  // namespace

double PrefillCostModel::PrefixCost(uint64_t tokens) const {
  const auto n = static_cast<double>(tokens);
  return linear * n + quadratic * n * n;
}

std::vector<std::string> MetricNames() {
  return std::vector<std::string>(std::begin(kMetricNames), std::end(kMetricNames));
}

std::string_view MetricName(Metric metric) { return kMetricNames[static_cast<size_t>(metric)]; }

Result<Metric> ParseMetric(std::string_view name) {
  for (size_t i = 0; i < std::size(kMetricNames); ++i) {
    if (name == kMetricNames[i]) return static_cast<Metric>(i);
  }
  return InvalidArgument("unknown metric '" + std::string(name) +
                         "' (known: block, token, prefill)");
}

std::vector<std::string> SimulationPolicyNames() {
  std::vector<std::string> names = index::EvictionPolicyNames();
  names.emplace_back(kBeladyPolicy);
  return names;
}

BlockKey KeyOfTraceId(uint64_t id) {
  uint64_t z = id + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return BlockKey{{z, id}};
}

double SimulationResult::block_hit_ratio() const {
  return Ratio(static_cast<double>(hit_blocks), static_cast<double>(total_blocks));
}

double SimulationResult::token_hit_ratio() const {
  return Ratio(static_cast<double>(hit_tokens), static_cast<double>(input_tokens));
}

double SimulationResult::saved_prefill_ratio() const {
  return Ratio(saved_prefill_cost, prefill_cost);
}

double SimulationResult::ratio(Metric metric) const {
  switch (metric) {
    case Metric::kBlock:
      return block_hit_ratio();
    case Metric::kToken:
      return token_hit_ratio();
    case Metric::kPrefill:
      return saved_prefill_ratio();
  }
  return 0.0;
}

void SimulationResult::Count(const TraceRequest& request, uint64_t hits,
                             const SimulationOptions& options) {
  const uint64_t tokens = std::min(hits * options.block_tokens, request.input_tokens);
  ++requests;
  total_blocks += request.hash_ids.size();
  hit_blocks += hits;
  input_tokens += request.input_tokens;
  hit_tokens += tokens;
  prefill_cost += options.cost.PrefixCost(request.input_tokens);
  saved_prefill_cost += options.cost.PrefixCost(tokens);
}

Status ValidateSimulationOptions(const SimulationOptions& options) {
  if (options.capacity_blocks == 0) return InvalidArgument("capacity must be at least 1 block");
  if (options.block_tokens == 0) return InvalidArgument("block_tokens must be at least 1");
  // Written so that NaN fails too.
  if (!(options.cost.linear >= 0) || !(options.cost.quadratic >= 0) ||
      !std::isfinite(options.cost.linear) || !std::isfinite(options.cost.quadratic)) {
    return InvalidArgument("prefill cost terms must be finite non-negative numbers");
  }
  // Belady never reads recency, so it would run exactly as without the option while the report
  // said put_order "key".
  if (options.key_order_puts && options.policy == kBeladyPolicy) {
    return InvalidArgument("key-order puts are for online policies: belady does not use recency");
  }
  if (!options.policy_params.empty()) {
    if (options.policy != "sticky") {
      return InvalidArgument("policy parameters are for the sticky policy, not " + options.policy);
    }
    KVTIER_RETURN_IF_ERROR(index::StickyLruPolicy::ParseParams(options.policy_params).status());
  }
  return Status::Ok();
}

Result<PolicySimulator> PolicySimulator::Create(const SimulationOptions& options,
                                                uint64_t max_distinct_blocks) {
  KVTIER_RETURN_IF_ERROR(ValidateSimulationOptions(options));
  if (options.policy == kBeladyPolicy) {
    return InvalidArgument("belady needs the whole trace: use Simulate");
  }
  auto now_ms = std::make_shared<uint64_t>(0);
  const index::PolicyClock clock = [now_ms] { return *now_ms; };
  const size_t capacity_hint = PolicyCapacityHint(options.capacity_blocks, max_distinct_blocks);
  if (!options.policy_params.empty()) {  // sticky (validated above)
    KVTIER_ASSIGN_OR_RETURN(const index::StickyLruPolicy::Params params,
                            index::StickyLruPolicy::ParseParams(options.policy_params));
    return PolicySimulator(options,
                           std::make_unique<index::StickyLruPolicy>(capacity_hint, clock, params),
                           std::move(now_ms));
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<index::EvictionPolicy> policy,
                          index::MakeEvictionPolicy(options.policy, capacity_hint, clock));
  return PolicySimulator(options, std::move(policy), std::move(now_ms));
}

// The header's three steps, on the policy alone: Contains is presence, Insert and Touch are what
// BlockIndex::InsertReady and a touching Lookup do to the tier's policy, PopVictim is PickVictim
// with nothing leased or pinned.
void PolicySimulator::Add(const TraceRequest& request) {
  keys_.clear();
  for (uint64_t id : request.hash_ids) keys_.push_back(KeyOfTraceId(id));
  *now_ms_ = std::max(*now_ms_, request.timestamp_ms);
  uint64_t hits = 0;
  while (hits < keys_.size() && policy_->Contains(keys_[hits])) ++hits;
  // The leading `hits` keys are known present (nothing is evicted before the request is done).
  inserted_.clear();
  const auto touch_or_insert = [&](size_t i) {
    if (policy_->Contains(keys_[i])) {
      policy_->Touch(keys_[i]);
    } else {
      policy_->Insert(keys_[i]);
      inserted_.push_back(i);
      ++result_.inserted_blocks;
    }
  };
  // The hit prefix is touched deepest first in one TouchRun, as a daemon's lookup touches it.
  const std::span<const BlockKey> hit_prefix(keys_.data(), hits);
  if (options_.key_order_puts) {
    policy_->TouchRun(hit_prefix);
    for (size_t i = hits; i < keys_.size(); ++i) touch_or_insert(i);
    std::reverse(inserted_.begin(), inserted_.end());  // deepest first
  } else {
    for (size_t i = keys_.size(); i-- > hits;) touch_or_insert(i);  // deepest first
    policy_->TouchRun(hit_prefix);
  }
  // A policy that refuses new blocks while the cache thrashes gives up this request's deepest new
  // blocks instead of older residents, as a refused put does in the daemon.
  for (size_t i : inserted_) {
    if (policy_->size() <= options_.capacity_blocks || policy_->AdmitsNew()) break;
    policy_->Erase(keys_[i]);
    policy_->NotAdmitted(keys_[i]);
    --result_.inserted_blocks;
    ++result_.not_admitted_blocks;
  }
  while (policy_->size() > options_.capacity_blocks && policy_->PopVictim()) {
    ++result_.evictions;
  }
  result_.Count(request, hits, options_);
}

Result<SimulationResult> Simulate(const std::vector<TraceRequest>& requests,
                                  const SimulationOptions& options) {
  if (options.policy == kBeladyPolicy) return SimulateBelady(requests, options);
  uint64_t block_references = 0;
  for (const TraceRequest& request : requests) block_references += request.hash_ids.size();
  KVTIER_ASSIGN_OR_RETURN(PolicySimulator simulator,
                          PolicySimulator::Create(options, block_references));
  for (const TraceRequest& request : requests) simulator.Add(request);
  return simulator.result();
}

}  // namespace kvtier::cli
