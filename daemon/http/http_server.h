// HttpServer: the operator's window into kvtierd, on loopback by default.
//
//   GET /metrics        Prometheus text (kvtier_* metrics)
//   GET /stats          the statistics as JSON (the document of KVT.STATS, `kvtier stats --json`)
//   GET /stats/history  their recent past as JSON (daemon/metrics/stats_history.h)
//   GET /healthz        "ok" while the daemon serves; 503 "starting" before its listeners are up
//   GET /               the dashboard: charts of /stats/history and tables of /stats, drawn by
//                       the page itself (no external resource: the daemon's machine may have no
//                       internet)
//
// The server owns one io_context and one named thread: metrics traffic is light, and keeping it off
// the RESP threads means a slow scraper never delays a cache request. Requests are read with a
// size limit and a timeout; anything but GET of these paths gets 404 or 405. HEAD gets the
// headers of the GET and no body. A provider that throws gets its request a 500; the connection
// and the server carry on. At most kMaxHttpConnections are served at once; more get a 503 and are
// closed, and a failed accept (out of descriptors) is retried after a pause, not at once.
//
// Thread safety: Start and Stop from the owning thread; the providers are called on the HTTP
// thread and must be safe to call from it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace kvtier::http {

// Connections served at once. An operator's browser and a scraper or two need a handful; the
// limit keeps a misbehaving client from taking every descriptor the RESP server needs.
inline constexpr int kMaxHttpConnections = 64;

struct HttpProviders {
  std::function<std::string()> metrics;  // Prometheus text
  std::function<std::string()> stats;    // JSON
  std::function<std::string()> history;  // JSON; unset: /stats/history is 404
  // Whether the daemon serves requests yet (its RESP listeners are up); unset: from the start.
  // HTTP starts first (its port is checked before anything else is done), so a probe must not
  // hear "ok" while engines' connections would still be refused.
  std::function<bool()> serving;
  // Where the server counts its failed accepts, so that the providers can report them; unset: a
  // counter of its own (failed_accepts() reads it either way).
  std::shared_ptr<std::atomic<uint64_t>> failed_accepts;
};

class HttpServer {
 public:
  // Binds host:port (host: an IP address or "localhost", common/listen_host.h; port 0: an
  // ephemeral port, see port()). Errors name the address.
  static Result<std::unique_ptr<HttpServer>> Start(const std::string& host, uint16_t port,
                                                   HttpProviders providers);
  ~HttpServer();  // Stops and joins.

  uint16_t port() const { return port_; }
  // Accepts that failed (EMFILE: out of descriptors); each is retried after a pause.
  uint64_t failed_accepts() const;
  void Stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl, uint16_t port);
  std::unique_ptr<Impl> impl_;
  uint16_t port_;
};

// The dashboard page served at "/".
const std::string& DashboardHtml();

}  // namespace kvtier::http
