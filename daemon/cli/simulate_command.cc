#include "daemon/cli/simulate_command.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/json_text.h"

namespace kvtier::cli {
namespace {

// A finished run: its counts and how long reading and simulating took together.
struct Run {
  SimulationResult result;
  double seconds = 0;

  double million_refs_per_s() const {
    return seconds > 0 ? static_cast<double>(result.total_blocks) / seconds / 1e6 : 0.0;
  }
};

// A bound on the distinct block ids of the trace at `path`, for PolicySimulator::Create: every id
// takes at least two bytes of the file (a digit and a ',' or ']'). 0 (no bound) when the size is
// unknown, as for a pipe.
uint64_t MaxDistinctBlocks(const std::string& path) {
  std::error_code error;
  const uintmax_t bytes = std::filesystem::file_size(path, error);
  return error ? 0 : bytes / 2;
}

// Online policies stream the trace: one request in memory at a time, its buffers reused.
Result<SimulationResult> SimulateStreaming(const std::string& path,
                                           const SimulationOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(PolicySimulator simulator,
                          PolicySimulator::Create(options, MaxDistinctBlocks(path)));
  KVTIER_ASSIGN_OR_RETURN(TraceReader reader, TraceReader::Open(path));
  TraceRequest request;
  while (true) {
    KVTIER_ASSIGN_OR_RETURN(bool found, reader.NextInto(request));
    if (!found) break;
    simulator.Add(request);
  }
  return simulator.result();
}

Result<SimulationResult> SimulateWholeOrStreaming(const std::string& path,
                                                  const SimulationOptions& options) {
  if (options.policy != kBeladyPolicy) return SimulateStreaming(path, options);
  KVTIER_RETURN_IF_ERROR(ValidateSimulationOptions(options));
  KVTIER_ASSIGN_OR_RETURN(std::vector<TraceRequest> trace, ReadTrace(path));
  return Simulate(trace, options);
}

// The run, refused when the cost model overflowed a double on this trace (--cost-quadratic 1e308):
// the totals would be infinite and their ratio NaN, printed as null or nan.
Result<SimulationResult> SimulateFile(const std::string& path, const SimulationOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(SimulationResult result, SimulateWholeOrStreaming(path, options));
  if (!std::isfinite(result.prefill_cost)) {  // saved_prefill_cost is at most this
    return InvalidArgument(
        "the trace's prefill cost overflows a double: lower --cost-linear or --cost-quadratic");
  }
  return result;
}

void PrintJson(const SimulateFlags& flags, const Run& run, Metric metric, std::ostream& out) {
  const SimulationResult& r = run.result;
  const SimulationOptions& o = flags.options;
  nlohmann::ordered_json j;
  j["trace"] = flags.trace_path;
  j["policy"] = o.policy;
  j["capacity_blocks"] = o.capacity_blocks;
  j["block_tokens"] = o.block_tokens;
  j["put_order"] = o.key_order_puts ? "key" : "last-first";
  if (!o.policy_params.empty()) j["policy_params"] = o.policy_params;
  j["metric"] = flags.metric;
  j["metric_ratio"] = r.ratio(metric);
  j["requests"] = r.requests;
  j["total_blocks"] = r.total_blocks;
  j["hit_blocks"] = r.hit_blocks;
  j["block_hit_ratio"] = r.block_hit_ratio();
  j["input_tokens"] = r.input_tokens;
  j["hit_tokens"] = r.hit_tokens;
  j["token_hit_ratio"] = r.token_hit_ratio();
  j["cost_linear"] = o.cost.linear;
  j["cost_quadratic"] = o.cost.quadratic;
  j["prefill_cost"] = r.prefill_cost;
  j["saved_prefill_cost"] = r.saved_prefill_cost;
  j["saved_prefill_ratio"] = r.saved_prefill_ratio();
  j["inserted_blocks"] = r.inserted_blocks;
  j["not_admitted_blocks"] = r.not_admitted_blocks;
  j["evictions"] = r.evictions;
  if (r.upper_bound_hit_blocks) {
    j["upper_bound_hit_blocks"] = *r.upper_bound_hit_blocks;
    j["optimal"] = *r.upper_bound_hit_blocks == r.hit_blocks;
  }
  j["seconds"] = run.seconds;
  j["million_refs_per_s"] = run.million_refs_per_s();
  out << JsonText(j) << "\n";
}

void PrintTable(const SimulateFlags& flags, const Run& run, Metric metric, std::ostream& out) {
  const SimulationResult& r = run.result;
  char line[160];
  auto row = [&](const char* name, double value, double hits, double ratio) {
    std::snprintf(line, sizeof(line), "%-16s %14.0f   hit %14.0f  (%6.2f%%)\n", name, value, hits,
                  100.0 * ratio);
    out << line;
  };
  out << "trace            " << flags.trace_path << "\n";
  out << "policy           " << flags.options.policy
      << (flags.options.policy_params.empty() ? "" : " (" + flags.options.policy_params + ")")
      << ", capacity "
      << flags.options.capacity_blocks << " blocks of " << flags.options.block_tokens
      << " tokens\n";
  std::snprintf(line, sizeof(line), "metric           %s: %.2f%%\n", flags.metric.c_str(),
                100.0 * r.ratio(metric));
  out << line;
  out << "requests         " << r.requests << "\n";
  row("blocks", r.total_blocks, r.hit_blocks, r.block_hit_ratio());
  row("input tokens", r.input_tokens, r.hit_tokens, r.token_hit_ratio());
  row("prefill cost", r.prefill_cost, r.saved_prefill_cost, r.saved_prefill_ratio());
  out << "inserted blocks  " << r.inserted_blocks << "\n";
  if (r.not_admitted_blocks != 0) out << "not admitted     " << r.not_admitted_blocks << "\n";
  out << "evictions        " << r.evictions << "\n";
  if (r.upper_bound_hit_blocks) {
    out << "optimum          "
        << (*r.upper_bound_hit_blocks == r.hit_blocks ? "exact" : "not proven")
        << ": no policy hits more than " << *r.upper_bound_hit_blocks << " blocks\n";
  }
  std::snprintf(line, sizeof(line), "rate             %.2f M block refs/s (%.2f s)\n",
                run.million_refs_per_s(), run.seconds);
  out << line;
}

// --metric and the prefill cost model's terms.
void AddMetricOptions(CLI::App& sub, SimulateFlags& flags) {
  sub.add_option("--metric", flags.metric,
                 "Figure to lead with: block hits, token hits, or saved prefill cost")
      ->check(CLI::IsMember(MetricNames()))
      ->capture_default_str();
  sub.add_option("--cost-linear", flags.options.cost.linear,
                 "Prefill cost per prompt token (weights); prefix of n tokens costs "
                 "linear*n + quadratic*n^2")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub.add_option("--cost-quadratic", flags.options.cost.quadratic,
                 "Prefill cost of attention, per squared prompt token")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

}  // namespace

int RunSimulate(const SimulateFlags& flags, std::ostream& out, std::ostream& err) {
  Result<Metric> metric = ParseMetric(flags.metric);
  if (!metric.ok()) {
    err << "kvtier simulate: " << metric.status().message() << "\n";
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  Result<SimulationResult> result = SimulateFile(flags.trace_path, flags.options);
  if (!result.ok()) {
    err << "kvtier simulate: " << result.status().message() << "\n";
    return 1;
  }
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  const Run run{*result, elapsed.count()};
  if (flags.json) {
    PrintJson(flags, run, *metric, out);
  } else {
    PrintTable(flags, run, *metric, out);
  }
  return 0;
}

Command AddSimulateCommand(CLI::App& app) {
  // Shared by the parser, which fills the flags, and the run function, which reads them.
  auto flags = std::make_shared<SimulateFlags>();
  CLI::App* sub = app.add_subcommand(
      "simulate",
      "Replay a Mooncake-format trace through an eviction policy offline and report "
      "hit ratios");
  sub->add_option("trace", flags->trace_path, "Trace file, one JSON request per line")->required();
  sub->add_option("--capacity-blocks", flags->options.capacity_blocks, "Cache capacity in blocks")
      ->required()
      ->check(CLI::PositiveNumber);
  sub->add_option("--policy", flags->options.policy,
                  "Eviction policy; belady is the offline optimum (reads the whole trace)")
      ->check(CLI::IsMember(SimulationPolicyNames()))
      ->capture_default_str();
  sub->add_option("--block-tokens", flags->options.block_tokens, "Tokens per trace block")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  AddMetricOptions(*sub, *flags);
  sub->add_flag("--key-order-puts", flags->options.key_order_puts,
                "Order a request's blocks as kvtierd sees a client that looks up, then puts in key "
                "order (new blocks end up more recent than the hit prefix); online policies only, "
                "not belady; see docs/simulate.md");
  sub->add_option("--policy-params", flags->options.policy_params,
                  "sticky only: NAME=VALUE,... over sample, window, quantile, memory, margin, "
                  "ghost (daemon/index/sticky_lru_policy.h), to measure their effect");
  sub->add_flag("--json", flags->json, "Print one JSON object instead of a table");
  // The options write into *flags during parsing, so the subcommand, which `app` owns, holds a
  // reference too: a caller that drops the returned Command must not leave them writing into
  // freed memory.
  sub->callback([flags] {});
  return Command{sub, [flags] { return RunSimulate(*flags, std::cout, std::cerr); }};
}

}  // namespace kvtier::cli
