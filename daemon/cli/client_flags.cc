#include "daemon/cli/client_flags.h"

#include <chrono>

#include "client/default_url.h"

namespace kvtier::cli {

void AddClientFlags(CLI::App* sub, ClientFlags* flags) {
  flags->url = client::DefaultUrl();
  sub->add_option("--url", flags->url, "Daemon address: unix:///path/to.sock or tcp://host:port")
      ->capture_default_str();
  sub->add_option("--password", flags->password, "Password for AUTH")->envname("KVTIER_PASSWORD");
  sub->add_option("--timeout-ms", flags->timeout_ms,
                  "Longest wait for the daemon per I/O step, in milliseconds (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

Result<client::Client> ConnectWithFlags(const ClientFlags& flags) {
  client::ConnectOptions options;
  options.password = flags.password;
  options.timeout = std::chrono::milliseconds(flags.timeout_ms);
  options.client_name = "kvtier-cli";
  return client::Client::Connect(flags.url, options);
}

}  // namespace kvtier::cli
