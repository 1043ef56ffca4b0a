// Test helpers: real redis-server processes on loopback ports, and redis-cli runs.
//
// The remote tier is tested against Debian's redis-server itself, not a fake, so that the cluster
// protocol (slot maps, MOVED, ASK, failover) is the real one. Each server runs in its own folder
// of a TempDir with persistence off and logs to a file there.
//
// Processes are started with fork + exec rather than tests/fakes/child_process.h's posix_spawn: the
// child asks the kernel for SIGKILL when the test process dies (PR_SET_PDEATHSIG), so a test that
// crashes or is killed by ctest's timeout leaves no server holding ports on the CI machine. No
// CUDA is involved here, so fork is safe.
//
// Not synchronised: one test thread drives these.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tiers/remote/redis_endpoint.h"

namespace kvtier::tiers::remote::testing {

// The redis-server and redis-cli the build found (REDIS_SERVER_PATH, REDIS_CLI_PATH); empty when
// none was found, and the tests skip.
std::string RedisServerPath();
std::string RedisCliPath();

// A fresh directory, removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `args` (args[0] a path), waits for it, and returns its standard output. kDeviceError when
// it cannot start or exits non-zero (its output in the message).
Result<std::string> RunProgram(const std::vector<std::string>& args);

// Runs redis-cli against 127.0.0.1:`port` with `args`; `password` adds -a (with --no-auth-warning).
Result<std::string> Cli(uint16_t port, const std::vector<std::string>& args,
                        const std::string& password = "");

// Waits until `condition` holds or `timeout` passes, checking every few milliseconds: the way
// these tests wait for a cluster to converge, never a fixed sleep. Returns whether it held.
bool PollUntil(std::chrono::milliseconds timeout, const std::function<bool()>& condition);

class RedisProcess {
 public:
  static constexpr std::string_view kPortPlaceholder = "{port}";
  // "{tls-port}": a second port, the chosen one + kTlsPortOffset (a server with both; with
  // tls-cluster its bus port is this one + 10000, also checked free).
  static constexpr std::string_view kTlsPortPlaceholder = "{tls-port}";
  static constexpr uint16_t kTlsPortOffset = 5000;
  // Starts redis-server on a free loopback port (and, for a cluster node, a free bus port at
  // port + 10000) in a new folder under `parent_dir`, with `extra_args` ("--cluster-enabled",
  // "yes", ...), and waits until it accepts connections. Retries with other ports when another
  // process took the chosen one first. An extra argument "{port}" is replaced by the chosen port
  // ("--port", "0", "--tls-port", "{port}": a server that speaks TLS only).
  static Result<std::unique_ptr<RedisProcess>> Start(const std::string& parent_dir,
                                                     const std::vector<std::string>& extra_args);
  ~RedisProcess();  // SIGKILL, then waits
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;

  uint16_t port() const { return port_; }
  HostPort address() const { return {"127.0.0.1", port_}; }
  // The TLS port given as "{tls-port}"; 0 without one.
  uint16_t tls_port() const { return tls_port_; }
  // Started, not killed and not stopped: redis-cli against it returns.
  bool answering() const { return pid_ > 0 && !stopped_; }

  void Kill();      // SIGKILL and wait: a crashed node
  void Stop();      // SIGSTOP: a hung node (TCP still accepts, nothing answers)
  void Continue();  // SIGCONT

 private:
  RedisProcess(pid_t pid, uint16_t port) : pid_(pid), port_(port) {}

  pid_t pid_;
  uint16_t port_;
  uint16_t tls_port_ = 0;
  bool stopped_ = false;
};

}  // namespace kvtier::tiers::remote::testing
