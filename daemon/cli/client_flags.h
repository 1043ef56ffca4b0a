// The connection flags every daemon-facing `kvtier` subcommand takes, and the connect step.
//
//   --url URL          unix:///path or tcp://host:port; default: the daemon's default socket
//                      (client/default_url.h)
//   --password P       AUTH password; also read from $KVTIER_PASSWORD
//   --timeout-ms N     longest wait for the daemon per I/O step (default 10000; 0: none)
//
// Plain data plus two functions; used from the main thread while parsing, then read-only (bench
// reads it from its worker threads).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "client/client.h"
#include "common/status.h"

namespace kvtier::cli {

struct ClientFlags {
  std::string url;
  std::string password;
  int64_t timeout_ms = 10'000;
};

// Registers --url, --password and --timeout-ms on `sub`, writing into `*flags` (which must
// outlive parsing). Fills flags->url with the default first.
void AddClientFlags(CLI::App* sub, ClientFlags* flags);

// Connects as the flags say. Errors: Client::Connect's.
Result<client::Client> ConnectWithFlags(const ClientFlags& flags);

}  // namespace kvtier::cli
