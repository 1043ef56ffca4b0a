// kvtier: the command-line tool. Each subcommand lives in its own *_command.cc; this file only
// builds the parser, dispatches to the chosen subcommand and returns its exit code.
#include <CLI/CLI.hpp>
#include <iostream>
#include <vector>

#include "daemon/cli/bench_command.h"
#include "daemon/cli/command.h"
#include "daemon/cli/explain_command.h"
#include "daemon/cli/ping_command.h"
#include "daemon/cli/replay_command.h"
#include "daemon/cli/simulate_command.h"
#include "daemon/cli/stats_command.h"

int main(int argc, char** argv) {
  CLI::App app{"kvtier: tools for the kvtier KV-cache daemon"};
  app.require_subcommand(1);
  std::vector<kvtier::cli::Command> commands = {
      kvtier::cli::AddSimulateCommand(app), kvtier::cli::AddPingCommand(app),
      kvtier::cli::AddStatsCommand(app),    kvtier::cli::AddBenchCommand(app),
      kvtier::cli::AddReplayCommand(app),   kvtier::cli::AddExplainCommand(app),
  };
  CLI11_PARSE(app, argc, argv);
  for (const kvtier::cli::Command& command : commands) {
    if (command.parser->parsed()) {
      return kvtier::cli::RunReportingExceptions(command, std::cerr);
    }
  }
  return 1;
}
