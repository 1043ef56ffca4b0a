#include "daemon/cli/simulate_command.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "daemon/cli/simulator.h"
#include "daemon/index/eviction_policy.h"

namespace kvtier::cli {
namespace {

void PrintJson(const SimulateFlags& flags, const SimulationResult& r, std::ostream& out) {
  nlohmann::ordered_json j;
  j["trace"] = flags.trace_path;
  j["policy"] = flags.policy;
  j["capacity_blocks"] = flags.capacity_blocks;
  j["block_tokens"] = flags.block_tokens;
  j["requests"] = r.requests;
  j["total_blocks"] = r.total_blocks;
  j["hit_blocks"] = r.hit_blocks;
  j["block_hit_ratio"] = r.block_hit_ratio();
  j["input_tokens"] = r.input_tokens;
  j["hit_tokens"] = r.hit_tokens;
  j["token_hit_ratio"] = r.token_hit_ratio();
  j["inserted_blocks"] = r.inserted_blocks;
  j["evictions"] = r.evictions;
  out << j.dump() << "\n";
}

void PrintTable(const SimulateFlags& flags, const SimulationResult& r, std::ostream& out) {
  char line[160];
  auto row = [&](const char* name, uint64_t value, uint64_t hits, double ratio) {
    std::snprintf(line, sizeof(line), "%-16s %14llu   hit %14llu  (%6.2f%%)\n", name,
                  static_cast<unsigned long long>(value), static_cast<unsigned long long>(hits),
                  100.0 * ratio);
    out << line;
  };
  out << "trace            " << flags.trace_path << "\n";
  out << "policy           " << flags.policy << ", capacity " << flags.capacity_blocks
      << " blocks of " << flags.block_tokens << " tokens\n";
  out << "requests         " << r.requests << "\n";
  row("blocks", r.total_blocks, r.hit_blocks, r.block_hit_ratio());
  row("input tokens", r.input_tokens, r.hit_tokens, r.token_hit_ratio());
  out << "inserted blocks  " << r.inserted_blocks << "\n";
  out << "evictions        " << r.evictions << "\n";
}

}  // namespace

int RunSimulate(const SimulateFlags& flags, std::ostream& out, std::ostream& err) {
  Result<std::vector<TraceRequest>> trace = ReadTrace(flags.trace_path);
  if (!trace.ok()) {
    err << "kvtier simulate: " << trace.status().message() << "\n";
    return 1;
  }
  SimulationOptions options;
  options.capacity_blocks = flags.capacity_blocks;
  options.policy = flags.policy;
  options.block_tokens = flags.block_tokens;
  Result<SimulationResult> result = Simulate(*trace, options);
  if (!result.ok()) {
    err << "kvtier simulate: " << result.status().message() << "\n";
    return 1;
  }
  if (flags.json) {
    PrintJson(flags, *result, out);
  } else {
    PrintTable(flags, *result, out);
  }
  return 0;
}

Command AddSimulateCommand(CLI::App& app) {
  // Shared by the parser, which fills the flags, and the run function, which reads them.
  auto flags = std::make_shared<SimulateFlags>();
  CLI::App* sub = app.add_subcommand(
      "simulate", "Replay a Mooncake-format trace through the index offline and report hit ratios");
  sub->add_option("trace", flags->trace_path, "Trace file, one JSON request per line")->required();
  sub->add_option("--capacity-blocks", flags->capacity_blocks, "Cache capacity in blocks")
      ->required()
      ->check(CLI::PositiveNumber);
  sub->add_option("--policy", flags->policy, "Eviction policy")
      ->check(CLI::IsMember(index::EvictionPolicyNames()))
      ->capture_default_str();
  sub->add_option("--block-tokens", flags->block_tokens, "Tokens per trace block")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  sub->add_flag("--json", flags->json, "Print one JSON object instead of a table");
  // The options write into *flags during parsing, so the subcommand, which `app` owns, holds a
  // reference too: a caller that drops the returned Command must not leave them writing into
  // freed memory.
  sub->callback([flags] {});
  return Command{sub, [flags] { return RunSimulate(*flags, std::cout, std::cerr); }};
}

}  // namespace kvtier::cli
