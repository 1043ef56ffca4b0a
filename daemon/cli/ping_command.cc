#include "daemon/cli/ping_command.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

namespace kvtier::cli {

int RunPing(const PingFlags& flags, std::ostream& out, std::ostream& err) {
  Result<client::Client> client = ConnectWithFlags(flags.client);
  if (!client.ok()) {
    err << "kvtier ping: " << client.status().ToString() << "\n";
    return 1;
  }
  for (uint64_t i = 0; i < flags.count; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const Status status = client->Ping();
    const auto elapsed = std::chrono::steady_clock::now() - start;
    if (!status.ok()) {
      err << "kvtier ping: " << status.ToString() << "\n";
      return 1;
    }
    char line[64];
    std::snprintf(line, sizeof(line), " in %.1f us\n",
                  std::chrono::duration<double, std::micro>(elapsed).count());
    out << "PONG from " << flags.client.url << line;
  }
  return 0;
}

Command AddPingCommand(CLI::App& app) {
  auto flags = std::make_shared<PingFlags>();
  CLI::App* sub = app.add_subcommand("ping", "Check that the daemon answers, and time a round trip");
  AddClientFlags(sub, &flags->client);
  sub->add_option("--count", flags->count, "PINGs to send")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // The options write into *flags while parsing; the subcommand keeps it alive (see simulate).
  sub->callback([flags] {});
  return Command{sub, [flags] { return RunPing(*flags, std::cout, std::cerr); }};
}

}  // namespace kvtier::cli
