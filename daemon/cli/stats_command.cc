#include "daemon/cli/stats_command.h"

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "daemon/cli/stats_table.h"

namespace kvtier::cli {

int RunStats(const StatsFlags& flags, std::ostream& out, std::ostream& err) {
  Result<client::Client> client = ConnectWithFlags(flags.client);
  if (!client.ok()) {
    err << "kvtier stats: " << client.status().ToString() << "\n";
    return 1;
  }
  Result<std::string> stats = client->Stats();
  if (!stats.ok()) {
    err << "kvtier stats: " << stats.status().ToString() << "\n";
    return 1;
  }
  if (flags.json) {
    // Checked, then printed as it came (not re-serialised, which could reorder or reformat it):
    // a script reading the output trusts exit code 0 to mean a JSON document.
    if (nlohmann::json::parse(*stats, /*cb=*/nullptr, /*allow_exceptions=*/false).is_discarded()) {
      err << "kvtier stats: the daemon's KVT.STATS answer is not JSON\n";
      return 1;
    }
    out << *stats << "\n";
    return 0;
  }
  Result<std::string> table = FormatStatsTable(*stats);
  if (!table.ok()) {
    err << "kvtier stats: " << table.status().message() << "\n";
    return 1;
  }
  out << *table;
  return 0;
}

Command AddStatsCommand(CLI::App& app) {
  auto flags = std::make_shared<StatsFlags>();
  CLI::App* sub = app.add_subcommand("stats", "Show tier usage and per-namespace hit ratios");
  AddClientFlags(sub, &flags->client);
  sub->add_flag("--json", flags->json, "Print the daemon's JSON document instead of tables");
  sub->callback([flags] {});
  return Command{sub, [flags] { return RunStats(*flags, std::cout, std::cerr); }};
}

}  // namespace kvtier::cli
